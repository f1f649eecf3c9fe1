// Command builtin-schemas writes the OpenAPI v3 schemas of Kubernetes' built-in types, as
// metascript bundles them to check hook outputs offline (src/schema/builtin.rs).
//
// It reads the api/openapi-spec/v3 documents of the k8s.io/kubernetes module (the Go module
// cache has them once the control plane is built), merges their components.schemas, drops the
// descriptions (most of the size, and no check reads them) and writes one schema per line,
// sorted by name, so a Kubernetes upgrade shows as a readable diff.
//
//	spec="$(go env GOMODCACHE)/k8s.io/kubernetes@v1.36.3/api/openapi-spec/v3"
//	(cd hack/builtin-schemas && go run . "$spec") > src/schema/builtin/kubernetes.json
//
// A new Kubernetes version also changes KUBERNETES_VERSION in src/schema/builtin.rs.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: builtin-schemas DIR (k8s.io/kubernetes's api/openapi-spec/v3)")
		os.Exit(2)
	}
	files, err := filepath.Glob(filepath.Join(os.Args[1], "*__*_openapi.json"))
	if err != nil || len(files) == 0 {
		fmt.Fprintf(os.Stderr, "builtin-schemas: no *__*_openapi.json documents in %s\n", os.Args[1])
		os.Exit(1)
	}
	schemas := map[string]any{}
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "builtin-schemas:", err)
			os.Exit(1)
		}
		var document struct {
			Components struct {
				Schemas map[string]any `json:"schemas"`
			} `json:"components"`
		}
		// Numbers stay as written: a bound or a default is not rounded through a float64.
		decoder := json.NewDecoder(bytes.NewReader(text))
		decoder.UseNumber()
		if err := decoder.Decode(&document); err != nil {
			fmt.Fprintf(os.Stderr, "builtin-schemas: %s: %v\n", file, err)
			os.Exit(1)
		}
		for name, schema := range document.Components.Schemas {
			schema = withoutDescriptions(schema)
			// Every group's document repeats the shared types (ObjectMeta, DeleteOptions, …):
			// they must agree but for the kinds each names them under, which add up.
			if kept, seen := schemas[name]; seen {
				merged, ok := mergeKinds(kept, schema)
				if !ok {
					fmt.Fprintf(os.Stderr, "builtin-schemas: %s differs between documents (%s)\n", name, file)
					os.Exit(1)
				}
				schema = merged
			}
			schemas[name] = schema
		}
	}
	names := make([]string, 0, len(schemas))
	for name := range schemas {
		names = append(names, name)
	}
	sort.Strings(names)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	fmt.Fprintln(out, "{")
	for i, name := range names {
		key, _ := json.Marshal(name)
		value, _ := json.Marshal(schemas[name])
		separator := ","
		if i == len(names)-1 {
			separator = ""
		}
		fmt.Fprintf(out, "%s:%s%s\n", key, value, separator)
	}
	fmt.Fprintln(out, "}")
}

const kindsKey = "x-kubernetes-group-version-kind"

// mergeKinds is a schema two documents both give, its kinds the union of theirs; false when
// they differ otherwise.
func mergeKinds(a, b any) (any, bool) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if !aok || !bok {
		return a, reflect.DeepEqual(a, b)
	}
	without := func(m map[string]any) map[string]any {
		rest := make(map[string]any, len(m))
		for key, value := range m {
			if key != kindsKey {
				rest[key] = value
			}
		}
		return rest
	}
	if !reflect.DeepEqual(without(am), without(bm)) {
		return a, false
	}
	kinds := map[string]any{}
	for _, m := range []map[string]any{am, bm} {
		list, _ := m[kindsKey].([]any)
		for _, kind := range list {
			key, _ := json.Marshal(kind)
			kinds[string(key)] = kind
		}
	}
	if len(kinds) == 0 {
		return am, true
	}
	keys := make([]string, 0, len(kinds))
	for key := range kinds {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	merged := without(am)
	list := make([]any, 0, len(keys))
	for _, key := range keys {
		list = append(list, kinds[key])
	}
	merged[kindsKey] = list
	return merged, true
}

func withoutDescriptions(value any) any {
	switch v := value.(type) {
	case map[string]any:
		kept := make(map[string]any, len(v))
		for key, inner := range v {
			if key != "description" || !isString(inner) {
				kept[key] = withoutDescriptions(inner)
			}
		}
		return kept
	case []any:
		for i, inner := range v {
			v[i] = withoutDescriptions(inner)
		}
		return v
	default:
		return value
	}
}

func isString(value any) bool {
	_, ok := value.(string)
	return ok
}
