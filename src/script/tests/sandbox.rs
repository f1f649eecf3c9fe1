//! One test per sandbox escape: each is blocked, with an error that says why.

use super::*;
use crate::script::log::LogLevel;
use serde_json::json;

fn blocked(language: Language, code: &str, expected: &str) {
    let error = run(language, code, json!({}))
        .map(|v| panic!("{language} `{code}` was not blocked, returned {v}"))
        .unwrap_err();
    assert!(
        error.to_string().contains(expected),
        "{language} `{code}`: expected {expected:?} in:\n{error}"
    );
}

#[test]
fn lua_require_is_blocked() {
    blocked(
        Language::Lua,
        "return require('os')",
        "require is not available in the metascript sandbox (no module loading)",
    );
}

#[test]
fn lua_code_loading_is_blocked() {
    for name in ["load", "loadstring"] {
        blocked(
            Language::Lua,
            &format!("return {name}('return 1')"),
            &format!("{name} is not available in the metascript sandbox (no code loading)"),
        );
    }
}

#[test]
fn lua_file_loading_is_blocked() {
    for name in ["dofile", "loadfile"] {
        blocked(
            Language::Lua,
            &format!("return {name}('/etc/passwd')"),
            &format!("{name} is not available in the metascript sandbox (no file system access)"),
        );
    }
}

#[test]
fn lua_io_is_blocked() {
    blocked(
        Language::Lua,
        "return io.open('/etc/passwd')",
        "io.open is not available in the metascript sandbox (no file system access)",
    );
    blocked(Language::Lua, "io.write('x')", "io.write is not available");
}

#[test]
fn lua_os_beyond_time_is_blocked() {
    for name in ["execute", "getenv", "remove", "rename", "exit", "tmpname"] {
        blocked(
            Language::Lua,
            &format!("return os.{name}('x')"),
            &format!(
                "os.{name} is not available in the metascript sandbox (only os.clock, os.time, os.date and os.difftime)"
            ),
        );
    }
    let result = run(
        Language::Lua,
        "return os.clock() >= 0 and os.difftime(2, 1) == 1",
        json!({}),
    );
    assert_eq!(result.unwrap(), json!(true));
}

#[test]
fn lua_environment_tampering_is_blocked() {
    blocked(
        Language::Lua,
        "return getfenv(1)",
        "getfenv is not available",
    );
    blocked(Language::Lua, "setfenv(1, {})", "setfenv is not available");
}

#[test]
fn lua_debug_is_blocked() {
    blocked(
        Language::Lua,
        "return debug.getinfo(1)",
        "debug.getinfo is not available in the metascript sandbox (no debug interface)",
    );
}

#[test]
fn lua_package_is_blocked() {
    blocked(
        Language::Lua,
        "return package.loaded",
        "package.loaded is not available",
    );
}

#[test]
fn lua_collectgarbage_only_counts() {
    blocked(
        Language::Lua,
        "collectgarbage('collect')",
        "collectgarbage is not available",
    );
    let result = run(
        Language::Lua,
        "return collectgarbage('count') > 0",
        json!({}),
    );
    assert_eq!(result.unwrap(), json!(true));
}

#[test]
fn lua_standard_library_is_read_only() {
    blocked(Language::Lua, "string.rep = nil", "readonly");
}

#[test]
fn lua_list_markers_are_protected() {
    blocked(
        Language::Lua,
        "local mt = getmetatable(array())\nmt.__index = function() end",
        "",
    );
    let result = run(Language::Lua, "return getmetatable(array())", json!({}));
    assert_eq!(result.unwrap(), json!("json array"));
}

#[test]
fn lua_print_goes_to_the_log_not_stdout() {
    let sink = LogSink::new();
    run_with(
        Language::Lua,
        "print('hello')",
        json!({}),
        &context().with_logs(sink.clone()),
    )
    .unwrap();
    assert_eq!(sink.lines()[0].message, "hello");
}

#[test]
fn rhai_eval_is_blocked() {
    let error = compile(Language::Rhai, "eval(\"1 + 1\")").unwrap_err();
    assert_eq!(error.kind, ScriptErrorKind::Compile);
    assert!(error.message.contains("'eval' is disabled"), "{error}");
    // Reaching eval through a function pointer fails too.
    blocked(
        Language::Rhai,
        "Fn(\"eval\").call(\"1\")",
        "'eval' is a reserved keyword",
    );
}

#[test]
fn rhai_modules_are_blocked() {
    let error = compile(Language::Rhai, "import \"fs\" as fs;\n1").unwrap_err();
    assert_eq!(error.kind, ScriptErrorKind::Compile);
    assert!(
        error.message.contains("'import' is a reserved keyword"),
        "{error}"
    );
}

#[test]
fn rhai_print_and_debug_go_to_the_log_not_stdout() {
    let sink = LogSink::new();
    run_with(
        Language::Rhai,
        "print(\"hello\"); debug(\"dbg\");",
        json!({}),
        &context().with_logs(sink.clone()),
    )
    .unwrap();
    let lines = sink.lines();
    assert_eq!(
        (lines[0].level, lines[0].message.as_str()),
        (LogLevel::Info, "hello")
    );
    assert_eq!(lines[1].level, LogLevel::Debug);
}

#[test]
fn rhai_has_no_file_process_or_environment_functions() {
    for call in [
        "open_file(\"/etc/passwd\")",
        "system(\"ls\")",
        "env(\"HOME\")",
        "read_file(\"/etc/passwd\")",
    ] {
        blocked(Language::Rhai, call, "no function");
    }
}

#[test]
fn rhai_sleep_is_refused_at_compile_time_and_at_run_time() {
    for code in [
        "let x = 1;\nsleep(300);\n#{}",
        "let x = 1;\nlet y = 300.0.sleep();\n#{}",
        "let x = 1;\nx.sleep();\n#{}",
    ] {
        let error = compile(Language::Rhai, code).unwrap_err();
        assert_eq!(error.kind, ScriptErrorKind::Compile, "{error}");
        assert_eq!(error.line, Some(2), "{error}");
        assert!(
            error
                .message
                .starts_with("`sleep` is not available to hooks: it would hold one of the workers"),
            "{error}"
        );
        assert!(error.message.contains("resyncAfterSeconds"), "{error}");
    }
    // Through a function pointer the compiler cannot see: refused when called, at once.
    let started = std::time::Instant::now();
    blocked(
        Language::Rhai,
        "Fn(\"sleep\").call(300)",
        "`sleep` is not available to hooks",
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// Prints what a sandbox offers that nobody reviewed, or what is listed but gone.
fn unreviewed(offered: std::collections::BTreeSet<String>, reviewed: &[&str]) -> String {
    let reviewed: std::collections::BTreeSet<String> =
        reviewed.iter().map(|name| name.to_string()).collect();
    let new: Vec<&String> = offered.difference(&reviewed).collect();
    let gone: Vec<&String> = reviewed.difference(&offered).collect();
    if new.is_empty() && gone.is_empty() {
        return String::new();
    }
    format!(
        "not reviewed: {new:?}\nno longer offered: {gone:?}\nReview each new one: it must neither \
         block nor run without ticking the budget (progress callback, interrupt) nor reach \
         files, processes, the network or the environment; then update the list."
    )
}

/// Every function a Rhai hook can call was reviewed: none blocks (`sleep` is refused), reaches
/// outside the sandbox, or runs unbounded past the progress callback (each is bounded by the
/// size limits or the operation count). A Rhai upgrade that adds one fails here until reviewed.
#[test]
fn every_rhai_function_was_reviewed() {
    let problems = unreviewed(super::super::rhai_engine::function_names(), REVIEWED_RHAI);
    assert!(problems.is_empty(), "{problems}");
}

/// Every global and library member a Lua hook can reach was reviewed, as for Rhai.
#[test]
fn every_lua_global_was_reviewed() {
    let problems = unreviewed(super::super::lua_engine::global_names(), REVIEWED_LUA);
    assert!(problems.is_empty(), "{problems}");
}

const REVIEWED_RHAI: &[&str] = &[
    "!",
    "!=",
    "%",
    "&",
    "*",
    "**",
    "+",
    "+=",
    "-",
    "-=",
    "/",
    "<",
    "<<",
    "<=",
    "==",
    ">",
    ">=",
    ">>",
    "E",
    "PI",
    "^",
    "abs",
    "acos",
    "acosh",
    "all",
    "annotation",
    "annotations",
    "append",
    "as_string",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "back_trace",
    "base64_decode",
    "base64_encode",
    "bits",
    "blob",
    "bytes",
    "ceiling",
    "chars",
    "chop",
    "clear",
    "contains",
    "cos",
    "cosh",
    "crop",
    "debug",
    "dedup",
    "deep_merge",
    "drain",
    "elapsed",
    "end",
    "ends_with",
    "event",
    "exit",
    "exp",
    "extract",
    "fill_with",
    "filter",
    "find",
    "find_map",
    "floor",
    "for_each",
    "fraction",
    "get",
    "get$bits",
    "get$bytes",
    "get$ceiling",
    "get$chars",
    "get$elapsed",
    "get$end",
    "get$floor",
    "get$fraction",
    "get$int",
    "get$is_anonymous",
    "get$is_empty",
    "get$is_even",
    "get$is_exclusive",
    "get$is_finite",
    "get$is_inclusive",
    "get$is_infinite",
    "get$is_nan",
    "get$is_odd",
    "get$is_zero",
    "get$len",
    "get$name",
    "get$round",
    "get$start",
    "get$tag",
    "get_bit",
    "get_bits",
    "get_fn_metadata_list",
    "get_path",
    "hypot",
    "index_of",
    "insert",
    "int",
    "is_anonymous",
    "is_empty",
    "is_even",
    "is_exclusive",
    "is_finite",
    "is_inclusive",
    "is_infinite",
    "is_nan",
    "is_odd",
    "is_zero",
    "json_decode",
    "json_encode",
    "keys",
    "label",
    "labels",
    "len",
    "list",
    "ln",
    "log",
    "make_lower",
    "make_upper",
    "map",
    "max",
    "min",
    "mixin",
    "name",
    "namespace",
    "now",
    "order",
    "order_by",
    "order_desc",
    "pad",
    "parse_be_float",
    "parse_be_int",
    "parse_duration",
    "parse_float",
    "parse_int",
    "parse_json",
    "parse_le_float",
    "parse_le_int",
    "parse_time",
    "pop",
    "print",
    "push",
    "range",
    "reduce",
    "reduce_rev",
    "remove",
    "replace",
    "retain",
    "reverse",
    "round",
    "selector_matches",
    "set",
    "set$tag",
    "set_bit",
    "set_bits",
    "set_tag",
    "sha256",
    "shift",
    "sign",
    "sin",
    "sinh",
    "sleep",
    "some",
    "sort",
    "sort_by",
    "sort_desc",
    "splice",
    "split",
    "split_rev",
    "sqrt",
    "start",
    "starts_with",
    "sub_string",
    "tag",
    "take",
    "tan",
    "tanh",
    "timestamp",
    "to_array",
    "to_binary",
    "to_blob",
    "to_chars",
    "to_debug",
    "to_degrees",
    "to_float",
    "to_hex",
    "to_int",
    "to_json",
    "to_lower",
    "to_octal",
    "to_radians",
    "to_rfc3339",
    "to_string",
    "to_upper",
    "trim",
    "truncate",
    "values",
    "write_ascii",
    "write_be",
    "write_le",
    "write_utf8",
    "yaml_decode",
    "yaml_encode",
    "zip",
    "|",
];

const REVIEWED_LUA: &[&str] = &[
    "_G",
    "_VERSION",
    "annotation",
    "annotations",
    "array",
    "assert",
    "base64_decode",
    "base64_encode",
    "bit32",
    "bit32.arshift",
    "bit32.band",
    "bit32.bnot",
    "bit32.bor",
    "bit32.btest",
    "bit32.bxor",
    "bit32.byteswap",
    "bit32.countlz",
    "bit32.countrz",
    "bit32.extract",
    "bit32.lrotate",
    "bit32.lshift",
    "bit32.replace",
    "bit32.rrotate",
    "bit32.rshift",
    "buffer",
    "buffer.copy",
    "buffer.create",
    "buffer.fill",
    "buffer.fromstring",
    "buffer.len",
    "buffer.readbits",
    "buffer.readf32",
    "buffer.readf64",
    "buffer.readi16",
    "buffer.readi32",
    "buffer.readi8",
    "buffer.readstring",
    "buffer.readu16",
    "buffer.readu32",
    "buffer.readu8",
    "buffer.tostring",
    "buffer.writebits",
    "buffer.writef32",
    "buffer.writef64",
    "buffer.writei16",
    "buffer.writei32",
    "buffer.writei8",
    "buffer.writestring",
    "buffer.writeu16",
    "buffer.writeu32",
    "buffer.writeu8",
    "collectgarbage",
    "coroutine",
    "coroutine.close",
    "coroutine.create",
    "coroutine.isyieldable",
    "coroutine.resume",
    "coroutine.running",
    "coroutine.status",
    "coroutine.wrap",
    "coroutine.yield",
    "debug",
    "deep_merge",
    "dofile",
    "error",
    "event",
    "gcinfo",
    "get",
    "get_path",
    "getfenv",
    "getmetatable",
    "io",
    "ipairs",
    "json_decode",
    "json_encode",
    "label",
    "labels",
    "list",
    "load",
    "loadfile",
    "loadstring",
    "log",
    "map",
    "math",
    "math.abs",
    "math.acos",
    "math.asin",
    "math.atan",
    "math.atan2",
    "math.ceil",
    "math.clamp",
    "math.cos",
    "math.cosh",
    "math.deg",
    "math.e",
    "math.exp",
    "math.floor",
    "math.fmod",
    "math.frexp",
    "math.huge",
    "math.isfinite",
    "math.isinf",
    "math.isnan",
    "math.ldexp",
    "math.lerp",
    "math.log",
    "math.log10",
    "math.map",
    "math.max",
    "math.min",
    "math.modf",
    "math.nan",
    "math.noise",
    "math.phi",
    "math.pi",
    "math.pow",
    "math.rad",
    "math.random",
    "math.randomseed",
    "math.round",
    "math.sign",
    "math.sin",
    "math.sinh",
    "math.sqrt",
    "math.sqrt2",
    "math.tan",
    "math.tanh",
    "math.tau",
    "name",
    "namespace",
    "newproxy",
    "next",
    "now",
    "null",
    "os",
    "os.clock",
    "os.date",
    "os.difftime",
    "os.time",
    "package",
    "pairs",
    "parse_duration",
    "parse_time",
    "pcall",
    "print",
    "rawequal",
    "rawget",
    "rawlen",
    "rawset",
    "require",
    "select",
    "selector_matches",
    "setfenv",
    "setmetatable",
    "sha256",
    "string",
    "string.byte",
    "string.char",
    "string.find",
    "string.format",
    "string.gmatch",
    "string.gsub",
    "string.len",
    "string.lower",
    "string.match",
    "string.pack",
    "string.packsize",
    "string.rep",
    "string.reverse",
    "string.split",
    "string.sub",
    "string.unpack",
    "string.upper",
    "table",
    "table.clear",
    "table.clone",
    "table.concat",
    "table.create",
    "table.find",
    "table.foreach",
    "table.foreachi",
    "table.freeze",
    "table.getn",
    "table.insert",
    "table.isfrozen",
    "table.maxn",
    "table.move",
    "table.pack",
    "table.remove",
    "table.sort",
    "table.unpack",
    "to_rfc3339",
    "tonumber",
    "tostring",
    "type",
    "typeof",
    "unpack",
    "utf8",
    "utf8.char",
    "utf8.charpattern",
    "utf8.codepoint",
    "utf8.codes",
    "utf8.len",
    "utf8.offset",
    "xpcall",
    "yaml_decode",
    "yaml_encode",
];
