//! "Did you mean": the nearest of some known names to a misspelled one, for error messages that
//! say the fix (a request field, a helper, a response field), the same in both engines.

/// How alike two names must be to suggest one for the other (normalized Damerau-Levenshtein:
/// 1.0 is equal). Low enough for one typo in a short name (`objet`/`object` is 0.83, `lables`/
/// `labels` 0.83), high enough not to offer an unrelated name.
const MIN_SIMILARITY: f64 = 0.6;

/// The comparison costs the product of the two lengths and runs outside a script's budgets (in a
/// Lua metamethod, or after a Rhai call), so a script must not be able to make it long: names
/// past this length and candidates past the count get no suggestion.
const MAX_NAME_LEN: usize = 64;
const MAX_CANDIDATES: usize = 1000;

/// The candidate nearest to `name`, if any is near enough; a candidate differing only in case
/// always is.
pub(crate) fn nearest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    if name.len() > MAX_NAME_LEN {
        return None;
    }
    candidates
        .into_iter()
        .take(MAX_CANDIDATES)
        .filter(|candidate| *candidate != name && candidate.len() <= MAX_NAME_LEN)
        .map(|candidate| {
            let score = if candidate.eq_ignore_ascii_case(name) {
                1.0
            } else {
                strsim::normalized_damerau_levenshtein(name, candidate)
            };
            (score, candidate)
        })
        .filter(|(score, _)| *score >= MIN_SIMILARITY)
        // Ties go to the first candidate, so suggestions do not depend on float noise.
        .fold(
            None,
            |best: Option<(f64, &str)>, (score, candidate)| match best {
                Some((best_score, _)) if best_score >= score => best,
                _ => Some((score, candidate)),
            },
        )
        .map(|(_, candidate)| candidate)
}

/// `; did you mean `x`?` for the nearest candidate, or nothing.
pub(crate) fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> String {
    nearest(name, candidates)
        .map(|candidate| format!("; did you mean `{candidate}`?"))
        .unwrap_or_default()
}

/// The message for reading a field a map does not have: `` `request.objet`: no such field; did
/// you mean `object`? ``. `path` is the read as the script wrote it.
pub(crate) fn no_such_field<'a>(
    path: &str,
    field: &str,
    keys: impl IntoIterator<Item = &'a str>,
) -> String {
    format!(
        "`{path}`: no such field{} (use get_path for a field that may be absent)",
        did_you_mean(field, keys)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_nearest_name() {
        let keys = [
            "controller",
            "object",
            "attachments",
            "related",
            "finalizing",
        ];
        assert_eq!(nearest("objet", keys), Some("object"));
        assert_eq!(nearest("Object", keys), Some("object"));
        assert_eq!(nearest("atachments", keys), Some("attachments"));
        assert_eq!(nearest("spec", keys), None);
        assert_eq!(nearest("object", keys), None, "no suggestion of itself");
    }

    #[test]
    fn long_names_and_long_candidate_lists_get_no_suggestion() {
        let long = "a".repeat(MAX_NAME_LEN + 1);
        assert_eq!(nearest(&long, [long.as_str()]), None);
        assert_eq!(nearest("objet", [long.as_str(), "object"]), Some("object"));
        let many: Vec<String> = (0..MAX_CANDIDATES).map(|i| format!("key{i}")).collect();
        let far = many.iter().map(String::as_str).chain(["object"]);
        assert_eq!(
            nearest("objet", far),
            None,
            "candidates past the cap are not compared"
        );
    }

    #[test]
    fn message_names_path_and_fix() {
        assert_eq!(
            no_such_field("request.objet", "objet", ["object", "related"]),
            "`request.objet`: no such field; did you mean `object`? \
             (use get_path for a field that may be absent)"
        );
        assert_eq!(did_you_mean("zzz", ["object"]), "");
    }
}
