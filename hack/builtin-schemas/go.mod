module metascript.dev/hack/builtin-schemas

go 1.22
