//! Completion and hover inside a script: what is being written at the cursor (a name, a member
//! of `request.…`, a key of a map), and what fits there: the helpers (the table `metascript
//! definitions` writes), the library functions, the hook's request and response fields, below
//! `request.object` (or `parent`, `input`, …) the fields of the object's type by its schema, and
//! below an object of the maps keyed by type (`request.attachments["Service.v1"]["web"].`) its
//! type's fields.

use super::diagnose::is_word;
use crate::api::{HookKind, Language};
use crate::script::helper_infos;

/// One completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Item {
    pub label: String,
    pub kind: ItemKind,
    /// A signature or type, shown beside the label.
    pub detail: String,
    /// Markdown.
    pub documentation: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ItemKind {
    Function,
    Variable,
    Field,
}

/// A field of an object's schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SchemaField {
    pub name: String,
    /// `string`, `integer`, `object`, `array of object`, …
    pub type_name: String,
    pub description: String,
}

/// Whose fields are asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Object<'a> {
    /// The object in a request field: `Request("object")` is `request.object`.
    Request(&'a str),
    /// Any object of a type, as the maps keyed by type hold them.
    Type { api_version: &'a str, kind: &'a str },
}

/// The fields of the objects a request holds, by their types' schemas.
pub(super) trait ObjectSchemas {
    /// The fields at `path` below an object, e.g. `(Request("object"), ["spec"])`; a step that
    /// is [`INDEX`] is an array's element or a map's value.
    fn fields(&self, object: Object<'_>, path: &[String]) -> Vec<SchemaField>;
}

/// A step of a chain indexed by something other than a string literal (`[0]`, `[name]`): an
/// array's element or a map's value, whichever the indexed value is.
pub(super) const INDEX: &str = "[]";

/// The type of the request fields that are maps of objects by `<Kind>.<apiVersion>`, then by
/// name (`attachments`, `children`, `related`, `outputs`): the contracts declare them so.
const BY_TYPE: &str = "table<string, table<string, table<string, any>>>";

/// A function a library defines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct LibraryFunction {
    pub library: String,
    pub name: String,
    /// The line that defines it, trimmed.
    pub signature: String,
    /// 1-based, in the library's text.
    pub line: u32,
    pub column: u32,
}

/// The functions a library defines: Rhai's `fn name(…)`; Lua's `function M.name(…)`,
/// `function name(…)` and `name = function(…)`.
pub(super) fn library_functions(
    language: Language,
    library: &str,
    text: &str,
) -> Vec<LibraryFunction> {
    let mut functions = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = (line.len() - trimmed.len()) as u32;
        let name_and_start = match language {
            Language::Rhai => trimmed
                .strip_prefix("private ")
                .unwrap_or(trimmed)
                .strip_prefix("fn ")
                .map(|rest| (rest, trimmed.len() - rest.len())),
            Language::Lua => trimmed
                .strip_prefix("local ")
                .unwrap_or(trimmed)
                .strip_prefix("function ")
                .map(|rest| {
                    // `function M.name(`: the name is after the last `.` or `:`.
                    let head = rest.split('(').next().unwrap_or_default();
                    let last = head.rfind(['.', ':']).map_or(0, |at| at + 1);
                    (&rest[last..], trimmed.len() - rest.len() + last)
                })
                .or_else(|| {
                    // `name = function(`, in a table constructor or as an assignment.
                    let (head, tail) = trimmed.split_once('=')?;
                    tail.trim_start().starts_with("function").then_some(())?;
                    let head = head.trim_end();
                    let last = head.rfind('.').map_or(0, |at| at + 1);
                    Some((&trimmed[last..head.len()], last))
                }),
        };
        let Some((rest, start)) = name_and_start else {
            continue;
        };
        let name: String = rest.chars().take_while(|c| is_word(*c)).collect();
        if name.is_empty() {
            continue;
        }
        functions.push(LibraryFunction {
            library: library.to_string(),
            name,
            signature: trimmed
                .trim_end()
                .trim_end_matches('{')
                .trim_end()
                .to_string(),
            line: index as u32 + 1,
            column: indent + start as u32 + 1,
        });
    }
    functions
}

/// What completion and hover know of a script.
pub(super) struct Setting<'a> {
    pub language: Language,
    /// The hook it is; all hooks when it is not known (a script file).
    pub hooks: Vec<HookKind>,
    pub libraries: Vec<LibraryFunction>,
    pub schemas: &'a dyn ObjectSchemas,
}

/// What is being written at a place in a script.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Cursor {
    /// The names before the word, from `request.object.` (`["request", "object"]`); an index
    /// by a string literal is its text (`x["a.b"].` is `["x", "a.b"]`), any other is [`INDEX`].
    pub chain: Vec<String>,
    /// The word up to the cursor.
    pub prefix: String,
    /// Whether the word is a key of a map literal (`#{ la` in Rhai, `{ la` in Lua).
    pub key: bool,
}

/// The chain of names before the word that starts at `start`: empty when the word is not a
/// member, one empty name when it is a member of something that is not a plain name (`f().x`).
fn chain_before(chars: &[char], start: usize) -> Vec<String> {
    let mut chain = Vec::new();
    let mut at = start;
    while at > 0 && chars[at - 1] == '.' {
        at -= 1;
        // Rhai's `?.`.
        if at > 0 && chars[at - 1] == '?' {
            at -= 1;
        }
        // A name and the indexes after it, read backwards: `name["key"][0]`.
        let mut steps = Vec::new();
        while at > 0 && chars[at - 1] == ']' {
            let Some((open, step)) = index_before(chars, at) else {
                chain.insert(0, String::new());
                return chain;
            };
            steps.push(step);
            at = open;
            // Rhai's `?[`.
            if at > 0 && chars[at - 1] == '?' {
                at -= 1;
            }
        }
        let end = at;
        while at > 0 && is_word(chars[at - 1]) {
            at -= 1;
        }
        let name: String = chars[at..end].iter().collect();
        if name.is_empty() {
            chain.insert(0, String::new());
            break;
        }
        steps.push(name);
        for step in steps {
            chain.insert(0, step);
        }
    }
    chain
}

/// The index that ends just before `end` (at a `]`): where its `[` is, and the step it is (a
/// string literal's text, else [`INDEX`]). `None` when the brackets do not match.
fn index_before(chars: &[char], end: usize) -> Option<(usize, String)> {
    let close = end - 1;
    // A string literal: `["Service.v1"]`, `['x']`.
    if close >= 3 && matches!(chars[close - 1], '"' | '\'') {
        let quote = chars[close - 1];
        let opening = chars[..close - 1].iter().rposition(|c| *c == quote)?;
        if opening > 0 && chars[opening - 1] == '[' {
            return Some((opening - 1, chars[opening + 1..close - 1].iter().collect()));
        }
    }
    let mut depth = 0;
    for at in (0..close).rev() {
        match chars[at] {
            ']' => depth += 1,
            '[' if depth == 0 => return Some((at, INDEX.to_string())),
            '[' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// Reads the place `offset` (in characters) of `code`.
pub(super) fn cursor(language: Language, code: &str, offset: usize) -> Cursor {
    let chars: Vec<char> = code.chars().collect();
    let offset = offset.min(chars.len());
    let mut start = offset;
    while start > 0 && is_word(chars[start - 1]) {
        start -= 1;
    }
    let chain = chain_before(&chars, start);
    let key = chain.is_empty() && in_map_key(language, &chars[..start]);
    Cursor {
        chain,
        prefix: chars[start..offset].iter().collect(),
        key,
    }
}

/// Whether the text ends where a map literal's key goes: after its `{` or a `,`, with the
/// innermost open bracket a map's (`#{` in Rhai; any `{` in Lua, whose tables are maps).
fn in_map_key(language: Language, before: &[char]) -> bool {
    let last = before.iter().rposition(|c| !c.is_whitespace());
    let Some(last) = last else {
        return false;
    };
    if !matches!(before[last], '{' | ',') {
        return false;
    }
    let mut depth = 0;
    for at in (0..=last).rev() {
        match before[at] {
            ')' | ']' | '}' => depth += 1,
            '(' | '[' if depth == 0 => return false,
            '{' if depth == 0 => {
                return language == Language::Lua || (at > 0 && before[at - 1] == '#');
            }
            '(' | '[' | '{' => depth -= 1,
            _ => {}
        }
    }
    false
}

type Fields = &'static [crate::api::Field];

/// The request (or response) fields of some hooks, each once, with the hooks that have it.
fn fields_of(
    hooks: &[HookKind],
    fields: fn(&'static crate::api::HookContract) -> Fields,
) -> Vec<(&'static crate::api::Field, Vec<HookKind>)> {
    let mut found: Vec<(&'static crate::api::Field, Vec<HookKind>)> = Vec::new();
    for hook in hooks {
        for field in fields(hook.contract()) {
            match found.iter_mut().find(|(known, _)| known.name == field.name) {
                Some((_, by)) => by.push(*hook),
                None => found.push((field, vec![*hook])),
            }
        }
    }
    found
}

fn hook_names(hooks: &[HookKind]) -> String {
    let names: Vec<String> = hooks
        .iter()
        .map(|hook| format!("{} {hook}", hook.kind().as_str()))
        .collect();
    names.join(", ")
}

const REQUEST_DOC: &str = "The hook's request (strict: reading a field it lacks is an error; \
    `get_path` reads one that may be missing).";

/// What fits at the cursor.
pub(super) fn complete(setting: &Setting, cursor: &Cursor) -> Vec<Item> {
    match cursor.chain.as_slice() {
        [] if cursor.key => fields_of(&setting.hooks, |contract| contract.response)
            .into_iter()
            .map(|(field, hooks)| Item {
                label: field.name.to_string(),
                kind: ItemKind::Field,
                detail: format!("response: {}", field.lua_type),
                documentation: format!("{} (response of {})", field.doc, hook_names(&hooks)),
            })
            .collect(),
        [] => {
            let mut items: Vec<Item> = helper_infos(setting.language)
                .into_iter()
                .map(|helper| Item {
                    label: helper.name.to_string(),
                    kind: ItemKind::Function,
                    detail: helper.signature,
                    documentation: helper.summary.to_string(),
                })
                .collect();
            items.push(Item {
                label: "request".into(),
                kind: ItemKind::Variable,
                detail: "the hook's request".into(),
                documentation: REQUEST_DOC.into(),
            });
            // A Rhai library's functions are called by name; a Lua library is a global.
            match setting.language {
                Language::Rhai => items.extend(setting.libraries.iter().map(library_item)),
                Language::Lua => {
                    let mut names: Vec<&str> = setting
                        .libraries
                        .iter()
                        .map(|f| f.library.as_str())
                        .collect();
                    names.dedup();
                    items.extend(names.into_iter().map(|name| Item {
                        label: name.to_string(),
                        kind: ItemKind::Variable,
                        detail: "library".into(),
                        documentation: format!("The library {name} (spec.libraries)."),
                    }));
                }
            }
            items
        }
        [request] if request == "request" => fields_of(&setting.hooks, |contract| contract.request)
            .into_iter()
            .map(|(field, hooks)| Item {
                label: field.name.to_string(),
                kind: ItemKind::Field,
                detail: field.lua_type.to_string(),
                documentation: format!("{} ({})", field.doc, hook_names(&hooks)),
            })
            .collect(),
        // `request.attachments["Service.v1"]["web"].`: the map's key names the type.
        [request, field, key, _name, path @ ..]
            if request == "request" && by_type(&setting.hooks, field) =>
        {
            let Some((kind, api_version)) = key.split_once('.') else {
                return Vec::new();
            };
            schema_items(
                setting
                    .schemas
                    .fields(Object::Type { api_version, kind }, path),
            )
        }
        [request, field, path @ ..] if request == "request" => {
            schema_items(setting.schemas.fields(Object::Request(field), path))
        }
        [library] if setting.language == Language::Lua => setting
            .libraries
            .iter()
            .filter(|function| &function.library == library)
            .map(library_item)
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether a request field of these hooks is a map of objects by type, then by name.
fn by_type(hooks: &[HookKind], name: &str) -> bool {
    fields_of(hooks, |contract| contract.request)
        .iter()
        .any(|(field, _)| field.name == name && field.lua_type == BY_TYPE)
}

fn schema_items(fields: Vec<SchemaField>) -> Vec<Item> {
    fields
        .into_iter()
        .map(|field| Item {
            label: field.name,
            kind: ItemKind::Field,
            detail: field.type_name,
            documentation: field.description,
        })
        .collect()
}

fn library_item(function: &LibraryFunction) -> Item {
    Item {
        label: function.name.clone(),
        kind: ItemKind::Function,
        detail: function.signature.clone(),
        documentation: format!("Defined in library {}.", function.library),
    }
}

/// The word at `offset` (around it, not only before it), and its cursor.
pub(super) fn word_at(language: Language, code: &str, offset: usize) -> Option<(Cursor, String)> {
    let chars: Vec<char> = code.chars().collect();
    let mut end = offset.min(chars.len());
    while end < chars.len() && is_word(chars[end]) {
        end += 1;
    }
    let here = cursor(language, code, end);
    (!here.prefix.is_empty()).then(|| {
        let word = here.prefix.clone();
        (here, word)
    })
}

/// Markdown about the word at the cursor.
pub(super) fn hover(setting: &Setting, cursor: &Cursor, word: &str) -> Option<String> {
    let item = complete(setting, cursor)
        .into_iter()
        .find(|item| item.label == word)?;
    let fence = match setting.language {
        Language::Rhai => "rhai",
        Language::Lua => "lua",
    };
    Some(match item.kind {
        ItemKind::Function => format!("```{fence}\n{}\n```\n{}", item.detail, item.documentation),
        ItemKind::Variable | ItemKind::Field => {
            format!("`{word}`: `{}`\n\n{}", item.detail, item.documentation)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::decorator::SYNC;

    struct PodSpec;

    impl ObjectSchemas for PodSpec {
        fn fields(&self, object: Object<'_>, path: &[String]) -> Vec<SchemaField> {
            let field = |name: &str| SchemaField {
                name: name.into(),
                type_name: "any".into(),
                description: String::new(),
            };
            match (object, path) {
                (Object::Request("object"), [spec]) if spec == "spec" => vec![SchemaField {
                    name: "containers".into(),
                    type_name: "array of object".into(),
                    description: "List of containers.".into(),
                }],
                (Object::Request("object"), [spec, containers, element])
                    if [spec, containers, element] == ["spec", "containers", INDEX] =>
                {
                    vec![field("image")]
                }
                (
                    Object::Type {
                        api_version: "v1",
                        kind: "Service",
                    },
                    [spec],
                ) if spec == "spec" => vec![field("ports")],
                _ => Vec::new(),
            }
        }
    }

    fn setting(language: Language) -> Setting<'static> {
        Setting {
            language,
            hooks: vec![SYNC],
            libraries: library_functions(language, "util", "fn tag(x) {\n  x\n}\nfn other() {}"),
            schemas: &PodSpec,
        }
    }

    fn labels(items: &[Item]) -> Vec<&str> {
        items.iter().map(|item| item.label.as_str()).collect()
    }

    #[test]
    fn the_cursor_knows_chains_prefixes_and_map_keys() {
        let rhai = Language::Rhai;
        let code = "let o = request.object.spec.co";
        assert_eq!(
            cursor(rhai, code, code.len()),
            Cursor {
                chain: vec!["request".into(), "object".into(), "spec".into()],
                prefix: "co".into(),
                key: false
            }
        );
        assert_eq!(cursor(rhai, "request?.", 9).chain, ["request"]);
        assert_eq!(cursor(rhai, "f().", 4).chain, [""]);
        // Indexes: a string literal's text, anything else any element.
        let code = r#"request.attachments["Service.v1"]["web"].sp"#;
        assert_eq!(
            cursor(rhai, code, code.len()).chain,
            ["request", "attachments", "Service.v1", "web"]
        );
        let code = "request.attachments['Service.v1'].web.";
        assert_eq!(
            cursor(Language::Lua, code, code.len()).chain,
            ["request", "attachments", "Service.v1", "web"]
        );
        let code = "o.spec.containers[i + 1]?[0].";
        assert_eq!(
            cursor(rhai, code, code.len()).chain,
            ["o", "spec", "containers", INDEX, INDEX]
        );
        assert_eq!(cursor(rhai, "f(x)[0].", 8).chain, [""]);
        assert_eq!(cursor(rhai, "x].", 3).chain, [""], "an unmatched bracket");
        assert!(cursor(rhai, "#{ labels: #{}, an", 18).key);
        assert!(cursor(rhai, "#{\n  ", 5).key);
        assert!(!cursor(rhai, "if x { la", 9).key, "a block is not a map");
        assert!(!cursor(rhai, "f(#{}, a", 8).key, "an argument is not a key");
        assert!(cursor(Language::Lua, "return { labels = {}, an", 24).key);
    }

    #[test]
    fn completion_offers_what_fits_the_cursor() {
        let rhai = setting(Language::Rhai);
        let names = complete(&rhai, &cursor(Language::Rhai, "get_", 4));
        let get_path = names.iter().find(|i| i.label == "get_path").unwrap();
        assert_eq!(get_path.kind, ItemKind::Function);
        assert!(get_path.detail.starts_with("get_path(obj: any"));
        assert!(labels(&names).contains(&"request"));
        assert!(
            labels(&names).contains(&"tag"),
            "library functions: {:?}",
            labels(&names)
        );
        let request = complete(&rhai, &cursor(Language::Rhai, "request.", 8));
        assert_eq!(
            labels(&request),
            [
                "controller",
                "object",
                "attachments",
                "related",
                "finalizing"
            ]
        );
        let keys = complete(&rhai, &cursor(Language::Rhai, "#{ ", 3));
        assert!(labels(&keys).contains(&"labels") && labels(&keys).contains(&"attachments"));
        let spec = complete(&rhai, &cursor(Language::Rhai, "request.object.spec.", 20));
        assert_eq!(labels(&spec), ["containers"]);
        let code = "request.object.spec.containers[0].";
        let container = complete(&rhai, &cursor(Language::Rhai, code, code.len()));
        assert_eq!(labels(&container), ["image"]);
        // Below an object of a map keyed by type, its type's fields; the map itself, its
        // types and a request field that is not such a map have none.
        let code = r#"request.attachments["Service.v1"]["web"].spec."#;
        let service = complete(&rhai, &cursor(Language::Rhai, code, code.len()));
        assert_eq!(labels(&service), ["ports"]);
        for code in [
            "request.attachments.",
            r#"request.attachments["Service.v1"]."#,
            r#"request.attachments["Service"]["web"].spec."#,
            r#"request.object["Service.v1"]["web"].spec."#,
        ] {
            let items = complete(&rhai, &cursor(Language::Rhai, code, code.len()));
            assert!(items.is_empty(), "{code}: {:?}", labels(&items));
        }
        // In Lua a library is a global whose functions are its members.
        let lua = Setting {
            libraries: library_functions(
                Language::Lua,
                "util",
                "local M = {}\nfunction M.tag(x) return x end\nM.other = function() end\nreturn M",
            ),
            ..setting(Language::Lua)
        };
        assert!(labels(&complete(&lua, &cursor(Language::Lua, "u", 1))).contains(&"util"));
        assert_eq!(
            labels(&complete(&lua, &cursor(Language::Lua, "util.", 5))),
            ["tag", "other"]
        );
    }

    /// The maps keyed by type are found by their declared type: every hook's, and only those.
    #[test]
    fn the_maps_keyed_by_type_are_the_contracts_maps_of_objects() {
        let hooks = crate::kinds::hooks();
        let mut found: Vec<&str> = fields_of(&hooks, |contract| contract.request)
            .into_iter()
            .map(|(field, _)| field.name)
            .filter(|name| by_type(&hooks, name))
            .collect();
        found.sort();
        assert_eq!(found, ["attachments", "children", "outputs", "related"]);
    }

    #[test]
    fn hover_documents_helpers_and_fields() {
        let rhai = setting(Language::Rhai);
        let code = "let n = get_path(request.object, \"x\");";
        let (here, word) = word_at(Language::Rhai, code, 10).unwrap();
        let text = hover(&rhai, &here, &word).unwrap();
        assert!(text.starts_with("```rhai\nget_path(obj: any"), "{text}");
        let (here, word) = word_at(Language::Rhai, code, 27).unwrap();
        assert_eq!(word, "object");
        let text = hover(&rhai, &here, &word).unwrap();
        assert!(text.contains("decorator sync"), "{text}");
        assert!(word_at(Language::Rhai, "  ", 1).is_none());
    }

    #[test]
    fn library_functions_are_found_with_their_place() {
        let rhai = library_functions(Language::Rhai, "util", "// x\n  fn tag(x) {\n  x\n}");
        assert_eq!(rhai.len(), 1);
        assert_eq!((rhai[0].line, rhai[0].column), (2, 6));
        assert_eq!(rhai[0].signature, "fn tag(x)");
        let lua = library_functions(
            Language::Lua,
            "util",
            "local function helper() end\nfunction M.tag(x) end\n  M.other = function() end",
        );
        let found: Vec<(&str, u32, u32)> = lua
            .iter()
            .map(|f| (f.name.as_str(), f.line, f.column))
            .collect();
        assert_eq!(found, [("helper", 1, 16), ("tag", 2, 12), ("other", 3, 5)]);
    }
}
