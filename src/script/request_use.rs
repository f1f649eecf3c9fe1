//! Which fields of `request` a script reads, found once from its source so that each call
//! converts only those (an observed child or related object the script never looks at is never
//! converted).
//!
//! The rule is deliberately narrow, so that it is sound without understanding the language: a
//! script reads only the fields it names if every occurrence of the variable `request` is
//!
//! - a field read or write with a literal name: `request.object`, `request["object"]` (Rhai
//!   also `?.` and `?[`; a Rhai method call such as `request.keys()` does not count), or
//! - the first argument of a call to an object reader (`get_path`, `name`, `label`, ...) whose
//!   name is only ever used to call it, never defined, assigned or passed around.
//!
//! Anything else (`request` assigned, passed to another function, returned, iterated, captured
//! under another name, a parameter or local called `request`, an interpolated Lua string, ...)
//! makes the script read all of it. Readers walk the request themselves and read the fields that
//! were not converted from the JSON (`ActiveGuard`), so they see the whole request either way.
//! `request` can only be reached by that name: a Luau script cannot get at its environment
//! (`getfenv`, `debug` are blocked) and Rhai has no way to name a variable dynamically.

use super::active::RequestUse;
use super::helpers::{HELPERS, Run};
use std::collections::BTreeSet;

#[derive(Clone, Debug, PartialEq)]
enum Token<'a> {
    Name(&'a str),
    /// A string literal; its text when it has no escapes.
    Str(Option<&'a str>),
    Punct(&'static str),
    /// Anything else: numbers, operators, keywords' punctuation.
    Other,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Lua,
    Rhai,
}

pub(crate) fn lua(code: &str) -> RequestUse {
    lex_lua(code).map_or(RequestUse::All, |tokens| analyze(&tokens, Dialect::Lua))
}

pub(crate) fn rhai(code: &str) -> RequestUse {
    let mut tokens = Vec::new();
    match lex_rhai(code.as_bytes(), 0, &mut tokens, false) {
        Some(_) => analyze(&tokens, Dialect::Rhai),
        None => RequestUse::All,
    }
}

fn analyze(tokens: &[Token], dialect: Dialect) -> RequestUse {
    let at = |i: usize| tokens.get(i).cloned().unwrap_or(Token::Other);
    let before = |i: usize| i.checked_sub(1).map_or(Token::Other, at);
    let is_reader = |name: &str| {
        HELPERS
            .iter()
            .any(|h| h.name == name && matches!(h.run, Run::Read(_)))
    };
    // A reader counts only if its name is never anything but a plain call.
    let plain_call = |i: usize| {
        let qualified = match dialect {
            Dialect::Lua => matches!(
                before(i),
                Token::Punct("." | ":") | Token::Name("function" | "local")
            ),
            Dialect::Rhai => matches!(
                before(i),
                Token::Punct("." | "?." | "::") | Token::Name("fn" | "let" | "const")
            ),
        };
        at(i + 1) == Token::Punct("(") && !qualified
    };
    let trusted: BTreeSet<&str> = HELPERS
        .iter()
        .filter(|h| matches!(h.run, Run::Read(_)))
        .map(|h| h.name)
        .filter(|name| {
            tokens
                .iter()
                .enumerate()
                .all(|(i, t)| *t != Token::Name(name) || plain_call(i))
        })
        .collect();
    let mut fields = BTreeSet::new();
    for (i, token) in tokens.iter().enumerate() {
        if *token != Token::Name("request") {
            continue;
        }
        // Someone else's field or method (Lua `x:request()`) of that name.
        let property = match dialect {
            Dialect::Lua => matches!(before(i), Token::Punct("." | ":")),
            Dialect::Rhai => matches!(before(i), Token::Punct("." | "?.")),
        };
        if property {
            continue;
        }
        let field = match (at(i + 1), at(i + 2), at(i + 3)) {
            (Token::Punct("."), Token::Name(name), next) => match dialect {
                Dialect::Lua => Some(name),
                // `request.keys()` is a method called on the whole request.
                Dialect::Rhai => (next != Token::Punct("(")).then_some(name),
            },
            (Token::Punct("?."), Token::Name(name), next) if dialect == Dialect::Rhai => {
                (next != Token::Punct("(")).then_some(name)
            }
            (Token::Punct("[" | "?["), Token::Str(Some(name)), Token::Punct("]")) => Some(name),
            _ => None,
        };
        if let Some(field) = field {
            fields.insert(field.to_string());
            continue;
        }
        let reader_argument = matches!(at(i + 1), Token::Punct("," | ")"))
            && before(i) == Token::Punct("(")
            && matches!(i.checked_sub(2).map(at), Some(Token::Name(name)) if is_reader(name) && trusted.contains(name));
        if !reader_argument {
            return RequestUse::All;
        }
    }
    RequestUse::Fields(fields)
}

fn is_name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The end of a name or number starting at `start`.
fn word_end(code: &[u8], start: usize) -> usize {
    let mut end = start;
    while end < code.len() && is_name_char(code[end]) {
        end += 1;
    }
    end
}

/// A number: digits, letters (hex, exponents, suffixes), `_`, `.` and an exponent's sign.
fn number_end(code: &[u8], start: usize) -> usize {
    let mut end = start;
    while end < code.len() {
        let b = code[end];
        let sign = (b == b'+' || b == b'-') && matches!(code[end - 1], b'e' | b'E' | b'p' | b'P');
        // `1..2` is a range or a concatenation, not a number.
        let dot = b == b'.' && code.get(end + 1) != Some(&b'.');
        if !(is_name_char(b) || dot || sign) {
            break;
        }
        end += 1;
    }
    end
}

/// A quoted string from its opening quote: its end, and its text if it has no escapes.
fn quoted(code: &[u8], start: usize) -> Option<(usize, Option<&str>)> {
    let quote = code[start];
    let mut end = start + 1;
    let mut escaped = false;
    loop {
        match code.get(end)? {
            b'\\' => {
                escaped = true;
                end += 2;
            }
            b if *b == quote => break,
            _ => end += 1,
        }
    }
    let text = std::str::from_utf8(&code[start + 1..end]).ok();
    Some((end + 1, text.filter(|_| !escaped)))
}

/// The level of a Lua long bracket `[==[` at `start`, if there is one.
fn long_bracket(code: &[u8], start: usize) -> Option<usize> {
    let level = code[start + 1..].iter().take_while(|b| **b == b'=').count();
    (code.get(start + 1 + level) == Some(&b'[')).then_some(level)
}

/// The end of a long bracket body of `level` whose text starts at `body`, and the body.
fn long_body(code: &[u8], body: usize, level: usize) -> Option<(usize, &str)> {
    let mut close = Vec::with_capacity(level + 2);
    close.push(b']');
    close.extend(std::iter::repeat_n(b'=', level));
    close.push(b']');
    let length = code[body..].windows(close.len()).position(|w| w == close)?;
    let text = std::str::from_utf8(&code[body..body + length]).ok()?;
    Some((body + length + close.len(), text))
}

/// Luau tokens, or `None` for what this lexer does not follow (interpolated strings, which hold
/// code, and malformed source).
fn lex_lua(code: &str) -> Option<Vec<Token<'_>>> {
    let code = code.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let b = code[i];
        let next = code.get(i + 1).copied();
        if b.is_ascii_whitespace() {
            i += 1;
        } else if b == b'-' && next == Some(b'-') {
            i = match code.get(i + 2).and_then(|_| long_bracket(code, i + 2)) {
                Some(level) if code[i + 2] == b'[' => long_body(code, i + 4 + level, level)?.0,
                _ => code[i..]
                    .iter()
                    .position(|b| *b == b'\n')
                    .map_or(code.len(), |p| i + p),
            };
        } else if b == b'[' && long_bracket(code, i).is_some() {
            let level = long_bracket(code, i)?;
            let (end, text) = long_body(code, i + 2 + level, level)?;
            tokens.push(Token::Str(Some(text)));
            i = end;
        } else if b == b'"' || b == b'\'' {
            let (end, text) = quoted(code, i)?;
            tokens.push(Token::Str(text));
            i = end;
        } else if b == b'`' {
            return None;
        } else if b.is_ascii_digit() || (b == b'.' && next.is_some_and(|n| n.is_ascii_digit())) {
            i = number_end(code, i);
            tokens.push(Token::Other);
        } else if is_name_start(b) {
            let end = word_end(code, i);
            tokens.push(Token::Name(std::str::from_utf8(&code[i..end]).ok()?));
            i = end;
        } else {
            let (punct, len) = punct(&code[i..], &[".", ":", "::", "(", ")", ",", "[", "]"]);
            tokens.push(punct);
            i += len;
        }
    }
    Some(tokens)
}

/// The punctuation at the start of `code`: the longest of `known`, else one other character
/// (multi-character operators such as `..` or `==` are consumed whole so that `..` never looks
/// like a field access).
fn punct(code: &[u8], known: &[&'static str]) -> (Token<'static>, usize) {
    const OPERATORS: &[&str] = &[
        "...", "..=", "..", "==", "~=", "!=", "<=", ">=", "=>", "->", "+=", "-=", "*=", "/=", "%=",
        "^=", "&&", "||", "//", "**", "<<", ">>",
    ];
    let longest = known
        .iter()
        .copied()
        .filter(|p| code.starts_with(p.as_bytes()))
        .max_by_key(|p| p.len());
    let operator = OPERATORS
        .iter()
        .find(|op| code.starts_with(op.as_bytes()))
        .map(|op| op.len());
    match (longest, operator) {
        (Some(p), Some(op)) if op > p.len() => (Token::Other, op),
        (Some(p), _) => (Token::Punct(p), p.len()),
        (None, Some(op)) => (Token::Other, op),
        // One character, however many bytes it takes.
        (None, None) => (
            Token::Other,
            std::str::from_utf8(code)
                .ok()
                .and_then(|s| s.chars().next())
                .map_or(1, char::len_utf8),
        ),
    }
}

/// Rhai tokens from `start`, appended to `tokens`; inside an interpolation (`${ ... }`) it stops
/// after the closing brace. Returns where it stopped, or `None` for malformed source.
fn lex_rhai<'a>(
    code: &'a [u8],
    start: usize,
    tokens: &mut Vec<Token<'a>>,
    interpolation: bool,
) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = start;
    while i < code.len() {
        let b = code[i];
        let next = code.get(i + 1).copied();
        if b.is_ascii_whitespace() {
            i += 1;
        } else if b == b'/' && next == Some(b'/') {
            i = code[i..]
                .iter()
                .position(|b| *b == b'\n')
                .map_or(code.len(), |p| i + p);
        } else if b == b'/' && next == Some(b'*') {
            // Block comments nest.
            let mut level = 0usize;
            loop {
                match (code.get(i)?, code.get(i + 1)) {
                    (b'/', Some(b'*')) => {
                        level += 1;
                        i += 2;
                    }
                    (b'*', Some(b'/')) => {
                        level -= 1;
                        i += 2;
                        if level == 0 {
                            break;
                        }
                    }
                    _ => i += 1,
                }
            }
        } else if b == b'"' || b == b'\'' {
            let (end, text) = quoted(code, i)?;
            tokens.push(if b == b'"' {
                Token::Str(text)
            } else {
                Token::Other
            });
            i = end;
        } else if b == b'#' && matches!(next, Some(b'"' | b'#')) {
            // A raw string: `#"..."#`, `##"..."##`, ...
            let hashes = code[i..].iter().take_while(|b| **b == b'#').count();
            if code.get(i + hashes) != Some(&b'"') {
                return None;
            }
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let body = i + hashes + 1;
            let length = code[body..].windows(close.len()).position(|w| w == close)?;
            tokens.push(Token::Str(
                std::str::from_utf8(&code[body..body + length]).ok(),
            ));
            i = body + length + close.len();
        } else if b == b'`' {
            // A template string: its `${ ... }` parts are code.
            tokens.push(Token::Other);
            i += 1;
            loop {
                match (code.get(i)?, code.get(i + 1)) {
                    (b'\\', _) => i += 2,
                    (b'`', _) => {
                        i += 1;
                        break;
                    }
                    (b'$', Some(b'{')) => {
                        tokens.push(Token::Other);
                        i = lex_rhai(code, i + 2, tokens, true)?;
                        tokens.push(Token::Other);
                    }
                    _ => i += 1,
                }
            }
        } else if b.is_ascii_digit() {
            i = number_end(code, i);
            tokens.push(Token::Other);
        } else if is_name_start(b) {
            let end = word_end(code, i);
            tokens.push(Token::Name(std::str::from_utf8(&code[i..end]).ok()?));
            i = end;
        } else if b == b'{' {
            depth += 1;
            tokens.push(Token::Other);
            i += 1;
        } else if b == b'}' {
            if interpolation && depth == 0 {
                return Some(i + 1);
            }
            depth = depth.saturating_sub(1);
            tokens.push(Token::Other);
            i += 1;
        } else {
            let (punct, len) = punct(
                &code[i..],
                &[".", "?.", "?[", ":", "::", "(", ")", ",", "[", "]"],
            );
            tokens.push(punct);
            i += len;
        }
    }
    // An interpolation must end with its brace.
    (!interpolation).then_some(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(names: &[&str]) -> RequestUse {
        RequestUse::Fields(names.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn the_examples_read_only_what_they_name() {
        for (file, expected) in [
            (
                "service-per-pod/sync.lua",
                fields(&["finalizing", "object"]),
            ),
            (
                "service-per-pod/sync.rhai",
                fields(&["finalizing", "object"]),
            ),
            ("configmap-propagation/sync.rhai", fields(&["object"])),
            ("snapshot-schedule/tombstone.lua", fields(&["parent"])),
        ] {
            let path = format!("{}/scripts/{file}", env!("CARGO_MANIFEST_DIR"));
            let code = std::fs::read_to_string(&path).unwrap();
            let found = if file.ends_with(".lua") {
                lua(&code)
            } else {
                rhai(&code)
            };
            assert_eq!(found, expected, "{file}");
        }
    }

    #[test]
    fn field_reads_and_reader_calls_keep_the_rest_unconverted() {
        for (code, expected) in [
            (
                "local o = request.object\nreturn request['parent'], get_path(request, 'x')",
                fields(&["object", "parent"]),
            ),
            (
                "request.status = 1 return name(request)",
                fields(&["status"]),
            ),
            ("-- request\nreturn 'request', [[request]]", fields(&[])),
            ("return x.request, x:request(), request.a.b", fields(&["a"])),
        ] {
            assert_eq!(lua(code), expected, "{code}");
        }
        for (code, expected) in [
            (
                "let o = request.object; `${request.parent.x}-${get_path(request, \"y\")}`",
                fields(&["object", "parent"]),
            ),
            (
                "// request\n/* /* request */ */ request?.a + request?[\"b\"] + x.request",
                fields(&["a", "b"]),
            ),
            ("#\"request\"#; request[\"c\"]", fields(&["c"])),
        ] {
            assert_eq!(rhai(code), expected, "{code}");
        }
    }

    #[test]
    fn any_other_use_reads_everything() {
        for code in [
            "return request",
            "for k, v in pairs(request) do end",
            "local r = request",
            "local request = {}",
            "local function f(request) return request end",
            "return request[key]",
            "return request:method()",
            "return json_encode(request)",
            "return get_path(x, request)",
            "return t.get_path(request)",
            "local get_path = function(r) return r end\nreturn get_path(request)",
            "get_path = print\nreturn get_path(request)",
            "local function name(r) return r end\nreturn name(request)",
            "return `{request.object}`",
            "return { request = request }",
            "return request['a\\98']",
        ] {
            assert_eq!(lua(code), RequestUse::All, "{code}");
        }
        for code in [
            "request",
            "let r = request; r",
            "request.keys()",
            "request?.keys()",
            "for x in request {}",
            "|x| request",
            "#{ r: request }",
            "fn name(r) { r } name(request)",
            "json_encode(request)",
            "`${request}`",
            "request += #{}",
            "\"unterminated",
        ] {
            assert_eq!(rhai(code), RequestUse::All, "{code}");
        }
    }
}
