//! The crate's layers (see the table in `lib.rs`), kept by reading the source: every
//! `use crate::…` and `crate::…` path outside test code must name a layer below the module's own,
//! and inside every module the files and folders beside each other use each other in no loop.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};

/// The top-level modules from the bottom up; a module may use only those before it.
const LAYERS: &[&str] = &[
    "object",
    "reasons",
    "version",
    "telemetry",
    "selector",
    "yaml",
    "api",
    "tenancy",
    "resources",
    "schema",
    "store",
    "reads",
    "script",
    "hooks",
    "plan",
    "cases",
    "runtime",
    "kinds",
    "validate",
    "lsp",
    "admission",
    "cli",
    "testing",
];

/// A file's tokens without its comments and without the items marked `#[cfg(test)]`, wherever
/// they sit. Lexing with proc-macro2 leaves string and char literals whole, so nothing in them is
/// taken for code.
fn non_test_tokens(text: &str) -> TokenStream {
    let stream: TokenStream = text.parse().expect("every source file lexes");
    without_test_items(stream)
}

fn without_test_items(stream: TokenStream) -> TokenStream {
    let mut kept = Vec::new();
    let mut trees = stream.into_iter().peekable();
    while let Some(tree) = trees.next() {
        if is_punct(&tree, '#') {
            if trees.peek().is_some_and(|next| is_punct(next, '!')) {
                let mut ahead = trees.clone();
                ahead.next();
                if ahead.next().is_some_and(|group| is_cfg_test(&group)) {
                    // `#![cfg(test)]`: the whole module is test code.
                    return TokenStream::new();
                }
            } else if trees.peek().is_some_and(is_cfg_test) {
                trees.next();
                skip_item(&mut trees);
                continue;
            }
        }
        kept.push(match tree {
            TokenTree::Group(group) => {
                let mut inner = Group::new(group.delimiter(), without_test_items(group.stream()));
                inner.set_span(group.span());
                TokenTree::Group(inner)
            }
            other => other,
        });
    }
    kept.into_iter().collect()
}

/// Drops the item after a `#[cfg(test)]`: an item (`fn`, `mod`, `use`, …) ends at its `;` or its
/// body; a field, a variant or an argument ends at its `,`.
fn skip_item(trees: &mut impl Iterator<Item = TokenTree>) {
    const ITEM_WORDS: &[&str] = &[
        "pub",
        "fn",
        "mod",
        "use",
        "impl",
        "struct",
        "enum",
        "trait",
        "type",
        "const",
        "static",
        "async",
        "unsafe",
        "extern",
        "macro_rules",
        "let",
    ];
    let mut is_item = None;
    for tree in trees {
        if let TokenTree::Ident(ident) = &tree {
            is_item.get_or_insert_with(|| ITEM_WORDS.contains(&ident.to_string().as_str()));
        }
        let ends = match &tree {
            TokenTree::Punct(punct) => {
                punct.as_char() == ';' || (punct.as_char() == ',' && is_item == Some(false))
            }
            TokenTree::Group(group) => {
                group.delimiter() == Delimiter::Brace && is_item != Some(false)
            }
            _ => false,
        };
        if ends {
            return;
        }
    }
}

fn is_punct(tree: &TokenTree, char: char) -> bool {
    matches!(tree, TokenTree::Punct(punct) if punct.as_char() == char)
}

fn is_cfg_test(tree: &TokenTree) -> bool {
    matches!(tree, TokenTree::Group(group) if group.delimiter() == Delimiter::Bracket
        && group.stream().to_string().replace(' ', "") == "cfg(test)")
}

/// The top-level modules a file's non-test code names with `crate::`.
fn crate_paths(text: &str) -> Vec<String> {
    paths(&non_test_tokens(text), "crate")
        .into_iter()
        .filter_map(|path| path.into_iter().next())
        .collect()
}

/// Every path the tokens start with `root::` (`crate`, `super`), as its segments after the
/// root; a `{a, b::c}` group gives one path per item.
fn paths(stream: &TokenStream, root: &str) -> Vec<Vec<String>> {
    let trees: Vec<TokenTree> = stream.clone().into_iter().collect();
    let mut found = Vec::new();
    for (at, tree) in trees.iter().enumerate() {
        match tree {
            TokenTree::Group(group) => found.extend(paths(&group.stream(), root)),
            // A `root` after `::` is inside a path already read (`super::super::x`).
            TokenTree::Ident(ident)
                if *ident == root
                    && starts_with_path_separator(&trees[at + 1..])
                    && !(at >= 2 && starts_with_path_separator(&trees[at - 2..])) =>
            {
                found.extend(tails(&trees[at + 3..]));
            }
            _ => {}
        }
    }
    found.retain(|path| !path.is_empty());
    found
}

/// The paths `trees` spell from their start: `a::b` is one, `{a, b::c}` one per item.
fn tails(trees: &[TokenTree]) -> Vec<Vec<String>> {
    match trees.first() {
        Some(TokenTree::Ident(ident)) => {
            let rest = if starts_with_path_separator(&trees[1..]) {
                tails(&trees[3..])
            } else {
                vec![Vec::new()]
            };
            rest.into_iter()
                .map(|mut tail| {
                    tail.insert(0, ident.to_string());
                    tail
                })
                .collect()
        }
        Some(TokenTree::Group(group)) if group.delimiter() == Delimiter::Brace => {
            let items: Vec<TokenTree> = group.stream().into_iter().collect();
            items
                .split(|tree| is_punct(tree, ','))
                .flat_map(tails)
                .collect()
        }
        _ => vec![Vec::new()],
    }
}

fn starts_with_path_separator(trees: &[TokenTree]) -> bool {
    trees.len() >= 2 && is_punct(&trees[0], ':') && is_punct(&trees[1], ':')
}

fn visit(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            // Test-only modules (`tests/`) may reach anywhere.
            if path.file_name().is_some_and(|n| n != "tests") {
                visit(&path, files);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

#[test]
fn no_module_uses_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    visit(&src, &mut files);
    let mut upward = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let top = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        let stem = relative.file_stem().unwrap().to_string_lossy();
        if matches!(top.as_str(), "lib" | "main" | "layering" | "fuzzing")
            || stem == "tests"
            || stem.ends_with("_tests")
        {
            continue;
        }
        let Some(own) = LAYERS.iter().position(|layer| *layer == top) else {
            upward.push(format!(
                "{}: the module {top} is not in LAYERS",
                relative.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for used in crate_paths(&text) {
            match LAYERS.iter().position(|layer| *layer == used) {
                Some(layer) if layer > own => upward.push(format!(
                    "{}: {top} uses crate::{used}, a layer above it",
                    relative.display()
                )),
                Some(_) => {}
                None => upward.push(format!(
                    "{}: crate::{used} is not a layer",
                    relative.display()
                )),
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports going up:\n{}",
        upward.join("\n")
    );
}

/// A file's module path (`src/runtime/kind.rs`: `runtime::kind`; a `mod.rs`: its folder's).
fn module_of(relative: &Path) -> Vec<String> {
    let mut path: Vec<String> = relative
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
}

/// The absolute module paths a file's code names (`crate::…`, and `super::…` from `module`).
fn named_modules(module: &[String], code: &TokenStream) -> Vec<Vec<String>> {
    let mut named = paths(code, "crate");
    for path in paths(code, "super") {
        let mut base = module[..module.len().saturating_sub(1)].to_vec();
        let mut rest = path.as_slice();
        while let Some(("super", after)) = rest.split_first().map(|(h, t)| (h.as_str(), t)) {
            base.pop();
            rest = after;
        }
        base.extend(rest.iter().cloned());
        named.push(base);
    }
    named
}

/// Every loop of uses among the modules beside each other in one folder, as `folder: a -> b ->
/// a`. A file's use of another counts for the sibling each lies in.
fn loops(uses: &BTreeMap<Vec<String>, Vec<Vec<String>>>) -> Vec<String> {
    let mut children: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    for module in uses.keys() {
        for depth in 0..module.len() {
            children
                .entry(module[..depth].to_vec())
                .or_default()
                .insert(module[depth].clone());
        }
    }
    let mut edges: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (from, targets) in uses {
        for to in targets {
            let shared = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            let (Some(a), Some(b)) = (from.get(shared), to.get(shared)) else {
                continue;
            };
            let folder = from[..shared].to_vec();
            if children.get(&folder).is_some_and(|names| names.contains(b)) {
                edges
                    .entry(folder)
                    .or_default()
                    .entry(a.clone())
                    .or_default()
                    .insert(b.clone());
            }
        }
    }
    let mut found = Vec::new();
    for (folder, graph) in &edges {
        for start in graph.keys() {
            // Paths from `start` back to itself, through names after it (each loop once).
            let mut stack = vec![vec![start.clone()]];
            while let Some(trail) = stack.pop() {
                let last = trail.last().expect("a trail is never empty");
                for next in graph.get(last).into_iter().flatten() {
                    if next == start {
                        found.push(format!(
                            "{}: {} -> {start}",
                            folder.join("::"),
                            trail.join(" -> ")
                        ));
                    } else if next > start && !trail.contains(next) {
                        let mut longer = trail.clone();
                        longer.push(next.clone());
                        stack.push(longer);
                    }
                }
            }
        }
    }
    found
}

#[test]
fn no_modules_beside_each_other_use_each_other_in_a_loop() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    visit(&src, &mut files);
    let mut uses = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let stem = relative.file_stem().unwrap().to_string_lossy();
        if stem == "tests" || stem.ends_with("_tests") {
            continue;
        }
        let module = module_of(relative);
        let code = non_test_tokens(&std::fs::read_to_string(&file).unwrap());
        uses.insert(module.clone(), named_modules(&module, &code));
    }
    let found = loops(&uses);
    assert!(found.is_empty(), "modules in a loop:\n{}", found.join("\n"));
}

#[test]
fn a_loop_of_uses_is_found_at_any_depth() {
    let module = |path: &str| path.split("::").map(str::to_string).collect::<Vec<_>>();
    let uses = BTreeMap::from([
        (
            module("runtime::kind"),
            vec![module("runtime::rollout::Share")],
        ),
        (
            module("runtime::rollout"),
            vec![module("runtime::kind::Kind")],
        ),
        (module("runtime::apply"), vec![module("runtime::Context")]),
        (module("runtime"), vec![module("runtime::apply")]),
        (module("plan"), vec![module("runtime::apply")]),
    ]);
    assert_eq!(loops(&uses), ["runtime: kind -> rollout -> kind"]);
    let code = "use super::helpers::{HelperEnv, walk};\nlet x = super::super::api::Hook;";
    assert_eq!(
        named_modules(&module("script::active"), &code.parse().unwrap()),
        [
            module("script::helpers::HelperEnv"),
            module("script::helpers::walk"),
            module("api::Hook")
        ]
    );
}

#[test]
fn test_items_anywhere_in_a_file_are_not_read() {
    let text = r##"
        use crate::api;
        #[cfg(test)]
        mod tests {
            use crate::cli;
            const S: &str = "}";
        }
        struct Seen {
            #[cfg(test)]
            calls: crate::testing::Calls,
            kept: crate::object::Name,
        }
        #[cfg(test)]
        use crate::testing;
        fn f() {
            let brace = '}';
            let json = r#"{"a": "crate::cli"}"#;
            /* crate::cli */
        }
        use crate::plan;
    "##;
    assert_eq!(crate_paths(text), ["api", "object", "plan"]);
    assert!(crate_paths("#![cfg(test)]\nuse crate::cli;").is_empty());
}

#[test]
fn the_reader_finds_every_form_of_crate_path() {
    let text = "use crate::api::Hook;\nuse crate::{object, plan::{Plan, self}};\nlet x = crate::kinds::ALL; // crate::cli\nfoo_crate::bar;\npub(crate) fn f() {}\nformat!(\"{}\", crate::reads::X);\n#[cfg(test)]\nuse crate::testing;";
    assert_eq!(
        crate_paths(text),
        ["api", "object", "plan", "plan", "kinds", "reads"]
    );
}
