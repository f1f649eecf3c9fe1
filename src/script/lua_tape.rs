//! A request field lent as JSON text, laid out flat for Luau before its call: a list of
//! tokens in the order they are pushed, its strings borrowed from the text where they hold no
//! escapes. Lua's conversion owns nothing while Luau may raise an error inside the protected
//! call (the rule its SAFETY comments rest on), so the text is laid out before; decoding it into
//! a `serde_json::Value` instead, a tree of small allocations freed after the call, cost more
//! than pushing it (docs/performance.md, "Lua reads text laid flat").

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// One step of a laid-out value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Token<'a> {
    Null,
    Bool(bool),
    Number(f64),
    Str(Cow<'a, str>),
    /// An array of this many items, which follow.
    Array(usize),
    /// An object of this many entries, which follow: each a `Str` key, then its value.
    Object(usize),
}

/// A JSON value laid out flat.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Tape<'a>(Vec<Token<'a>>);

impl<'a> Tape<'a> {
    /// Lays out JSON text serialized from a `Value` (as the watch caches keep objects).
    pub(crate) fn of(text: &'a str) -> Tape<'a> {
        // About one token per eight bytes of a Kubernetes object's text.
        let mut tokens = Vec::with_capacity(text.len() / 8);
        let mut deserializer = serde_json::Deserializer::from_str(text);
        Laying(&mut tokens)
            .deserialize(&mut deserializer)
            .expect("JSON text serialized from a Value reads back");
        Tape(tokens)
    }

    pub(crate) fn tokens(&self) -> std::slice::Iter<'_, Token<'a>> {
        self.0.iter()
    }
}

/// Appends one value's tokens.
struct Laying<'t, 'a>(&'t mut Vec<Token<'a>>);

impl<'a> Laying<'_, 'a> {
    fn push(self, token: Token<'a>) {
        self.0.push(token);
    }
}

impl<'de> DeserializeSeed<'de> for Laying<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Laying<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.push(Token::Null);
        Ok(())
    }

    fn visit_bool<E>(self, value: bool) -> Result<(), E> {
        self.push(Token::Bool(value));
        Ok(())
    }

    // As `Value::as_f64` gives a number to Luau.
    fn visit_i64<E>(self, value: i64) -> Result<(), E> {
        self.push(Token::Number(value as f64));
        Ok(())
    }

    fn visit_u64<E>(self, value: u64) -> Result<(), E> {
        self.push(Token::Number(value as f64));
        Ok(())
    }

    fn visit_f64<E>(self, value: f64) -> Result<(), E> {
        self.push(Token::Number(value));
        Ok(())
    }

    fn visit_borrowed_str<E>(self, value: &'de str) -> Result<(), E> {
        self.push(Token::Str(Cow::Borrowed(value)));
        Ok(())
    }

    fn visit_str<E>(self, value: &str) -> Result<(), E> {
        self.push(Token::Str(Cow::Owned(value.to_owned())));
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let at = self.0.len();
        self.0.push(Token::Array(0));
        let mut items = 0;
        while seq.next_element_seed(Laying(self.0))?.is_some() {
            items += 1;
        }
        self.0[at] = Token::Array(items);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let at = self.0.len();
        self.0.push(Token::Object(0));
        let mut entries = 0;
        while map.next_key_seed(Laying(self.0))?.is_some() {
            map.next_value_seed(Laying(self.0))?;
            entries += 1;
        }
        self.0[at] = Token::Object(entries);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_value_is_laid_in_push_order_with_its_strings_borrowed_where_it_can() {
        let value = json!({"b": [1, -2, 2.5, null, true], "a": {"k": "plain", "q": "say \"hi\""}});
        let text = value.to_string();
        let tape = Tape::of(&text);
        let str = |s: &'static str| Token::Str(Cow::Borrowed(s));
        assert_eq!(
            tape.0,
            [
                Token::Object(2),
                str("a"),
                Token::Object(2),
                str("k"),
                str("plain"),
                str("q"),
                Token::Str(Cow::Owned("say \"hi\"".into())),
                str("b"),
                Token::Array(5),
                Token::Number(1.0),
                Token::Number(-2.0),
                Token::Number(2.5),
                Token::Null,
                Token::Bool(true),
            ]
        );
        assert!(matches!(&tape.0[4], Token::Str(Cow::Borrowed(_))));
        assert!(matches!(&tape.0[6], Token::Str(Cow::Owned(_))));
        assert_eq!(Tape::of("[]").0, [Token::Array(0)]);
        assert_eq!(Tape::of("\"x\"").0, [str("x")]);
    }
}
