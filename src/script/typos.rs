//! Helper names misspelled in a script, found without running it: a call of a function that is
//! neither a helper, nor the language's, nor defined by the script, and whose name is near a
//! helper's. Running the script says the same (`did you mean`), but only once a call reaches
//! the line; an editor says it as the script is written, tests or not.

use super::helpers::HELPERS;
use super::suggest::nearest;
use super::{lua_engine, rhai_engine};
use crate::api::Language;
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// A call that is probably a misspelled helper.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Misspelled {
    /// 1-based.
    pub line: u32,
    pub column: u32,
    pub name: String,
    pub helper: &'static str,
}

impl std::fmt::Display for Misspelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` is not a helper, nor defined in this script; did you mean `{}`? (a library's \
             function of that name is fine: the check does not see libraries)",
            self.name, self.helper
        )
    }
}

/// The calls in `code` that are probably misspelled helpers, in order.
pub(crate) fn misspelled_helpers(language: Language, code: &str) -> Vec<Misspelled> {
    static RHAI: OnceLock<BTreeSet<String>> = OnceLock::new();
    static LUA: OnceLock<BTreeSet<String>> = OnceLock::new();
    let (calls, known) = match language {
        Language::Rhai => (
            rhai_engine::undefined_calls(code),
            RHAI.get_or_init(rhai_engine::known_functions),
        ),
        Language::Lua => (
            lua_engine::undefined_calls(code),
            LUA.get_or_init(|| lua_engine::sandbox_globals().into_iter().collect()),
        ),
    };
    calls
        .into_iter()
        .filter(|(name, _, _)| !known.contains(name))
        .filter_map(|(name, line, column)| {
            let helper = nearest(&name, HELPERS.iter().map(|h| h.name))?;
            Some(Misspelled {
                line,
                column,
                name,
                helper,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(language: Language, code: &str) -> Vec<(String, u32, u32, &'static str)> {
        misspelled_helpers(language, code)
            .into_iter()
            .map(|m| (m.name, m.line, m.column, m.helper))
            .collect()
    }

    #[test]
    fn a_misspelled_helper_is_found_where_it_is_called() {
        let rhai = "let size = 1;\nlet l = lable(request.object, \"size\");\n#{}";
        assert_eq!(
            found(Language::Rhai, rhai),
            [("lable".to_string(), 2, 9, "label")]
        );
        let lua = "local size = 1\nlocal l = lable(request.object, \"size\")\nreturn {}";
        assert_eq!(
            found(Language::Lua, lua),
            [("lable".to_string(), 2, 11, "label")]
        );
    }

    #[test]
    fn helpers_builtins_own_functions_methods_comments_and_strings_are_not() {
        let rhai = "fn lable(x) { x }\n\
                    // get_pth(request)\n\
                    let s = \"get_pth(x)\";\n\
                    let n = parse_int(\"1\") + parse_float(\"1.0\").to_int();\n\
                    let t = request.object.lable();\n\
                    print(type_of(label(request.object, \"a\")));\n\
                    lable(1)";
        assert_eq!(found(Language::Rhai, rhai), []);
        let lua = "local function lable(x) return x end\n\
                   -- get_pth(request)\n\
                   --[[ get_pth(request) ]]\n\
                   local s = \"get_pth(x)\" .. [[get_pth(y)]]\n\
                   local n = tonumber(\"1\") + select(\"#\", 1)\n\
                   local t = string.lower(\"A\") .. obj:lable()\n\
                   print(typeof(label(request.object, \"a\")))\n\
                   return lable(1)";
        assert_eq!(found(Language::Lua, lua), []);
    }

    #[test]
    fn a_name_far_from_every_helper_is_left_alone() {
        assert_eq!(found(Language::Rhai, "frobnicate(1)"), []);
        assert_eq!(found(Language::Lua, "return frobnicate(1)"), []);
    }
}
