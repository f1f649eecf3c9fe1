//! Where each value of a YAML text is, and where each character of a string value came from.
//!
//! A script inline in a manifest is a YAML string: the engines number its lines and columns from
//! the string's start, editors and users from the file's. [`YamlIndex`] keeps, for every node of
//! every document, its path and its place in the text, and maps a place in a string value to the
//! file ([`YamlIndex::file_position`]) and back ([`YamlIndex::string_offset`]), in every scalar
//! style: block (`|`, `>`), plain and quoted (an escape such as `\"` is the character it makes).

use granit_parser::{Event, Parser, ScalarStyle};
use std::fmt;

/// A place in a text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Position {
    /// 0-based line.
    pub line: u32,
    /// 0-based column, in characters (not bytes).
    pub column: u32,
}

/// A stretch of a text, its end exclusive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Range {
    pub start: Position,
    pub end: Position,
}

impl Range {
    /// Whether `at` is in the range or at its end (where a cursor after the last character is).
    pub(crate) fn contains(&self, at: Position) -> bool {
        self.start <= at && at <= self.end
    }
}

/// One step of a path from a document's root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Key(String),
    Index(usize),
}

/// A path the way findings and errors name fields: `spec.tests[1]`, `data.sync.rhai`.
pub(crate) fn path_text(path: &[Step]) -> String {
    let mut text = String::new();
    for step in path {
        match step {
            Step::Key(key) => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(key);
            }
            Step::Index(index) => text.push_str(&format!("[{index}]")),
        }
    }
    text
}

/// A value in a document: a scalar, a mapping or a sequence.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub path: Vec<Step>,
    /// Where its key is, for a value in a mapping.
    pub key: Option<Range>,
    pub value: Range,
    scalar: Option<Scalar>,
}

impl Node {
    pub(crate) fn path_text(&self) -> String {
        path_text(&self.path)
    }

    /// The string value of a scalar (whatever its type to YAML: `1` is "1").
    pub(crate) fn scalar(&self) -> Option<&str> {
        self.scalar.as_ref().map(|scalar| scalar.text.as_str())
    }
}

#[derive(Clone, Debug)]
struct Scalar {
    text: String,
    style: ScalarStyle,
    /// Character offsets in the file of the scalar's source, from its first character (an
    /// opening quote, or a block's first content character) to its end.
    start: usize,
    end: usize,
    /// A block scalar's indentation: the columns skipped on each of its lines.
    indent: Option<usize>,
}

/// A comment, `#` and all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Comment {
    /// What follows the `#`.
    pub text: String,
    pub range: Range,
}

/// One document of a YAML text.
#[derive(Clone, Debug, Default)]
pub(crate) struct YamlDocument {
    /// In the order they appear; the root first.
    pub nodes: Vec<Node>,
    pub comments: Vec<Comment>,
}

impl YamlDocument {
    /// The node at a path, named as [`path_text`] names it (`spec.hooks.sync`).
    pub(crate) fn node(&self, path: &str) -> Option<&Node> {
        self.nodes.iter().find(|node| node.path_text() == path)
    }

    /// Whether the document holds nothing (`parse_documents` skips it): no node, or a null root.
    pub(crate) fn is_empty(&self) -> bool {
        match self.nodes.first() {
            None => true,
            Some(root) => {
                matches!(&root.scalar, Some(s) if s.style == ScalarStyle::Plain
                    && matches!(s.text.as_str(), "" | "~" | "null" | "Null" | "NULL"))
            }
        }
    }

    /// The comments between the end of `node` and the start of the next node: where a line that
    /// was meant to continue a script went when YAML read it as a comment.
    pub(crate) fn comments_after<'a>(
        &'a self,
        node: &Node,
    ) -> impl Iterator<Item = &'a Comment> + 'a {
        let end = node.value.end;
        let next = self
            .nodes
            .iter()
            .map(|n| n.key.map_or(n.value.start, |key| key.start))
            .filter(|start| *start >= end)
            .min();
        self.comments.iter().filter(move |comment| {
            comment.range.start >= end && next.is_none_or(|next| comment.range.start < next)
        })
    }
}

/// YAML that does not parse, and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) struct YamlSyntaxError {
    pub at: Position,
    pub message: String,
}

impl fmt::Display for YamlSyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.at.line + 1,
            self.at.column + 1,
            self.message
        )
    }
}

/// The nodes and comments of every document of a YAML text, and the text, to map places in
/// string values to places in the file.
#[derive(Clone, Debug)]
pub(crate) struct YamlIndex {
    chars: Vec<char>,
    /// The character offset at which each line starts.
    line_starts: Vec<usize>,
    documents: Vec<YamlDocument>,
}

/// The collection a parser is inside of, while indexing.
enum Frame {
    Mapping {
        node: usize,
        /// The key read, whose value comes next; `None` when a key comes next.
        key: Option<(String, Range)>,
    },
    Sequence {
        node: usize,
        next: usize,
    },
}

impl YamlIndex {
    /// Indexes a YAML text.
    pub(crate) fn parse(text: &str) -> Result<YamlIndex, YamlSyntaxError> {
        let chars: Vec<char> = text.chars().collect();
        let line_starts = std::iter::once(0)
            .chain(
                chars
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| **c == '\n')
                    .map(|(i, _)| i + 1),
            )
            .collect();
        let mut index = YamlIndex {
            chars,
            line_starts,
            documents: Vec::new(),
        };
        let mut parser = Parser::new_from_str(text);
        let mut frames: Vec<Frame> = Vec::new();
        // Comments before the first document belong to it.
        let mut pending_comments = Vec::new();
        let mut document: Option<YamlDocument> = None;
        while let Some(event) = parser.next_event() {
            let (event, span) = event.map_err(|error| YamlSyntaxError {
                at: index.position(error.marker().index()),
                message: error.info(),
            })?;
            let range = Range {
                start: index.position(span.start.index()),
                end: index.position(span.end.index()),
            };
            let scalar = match &event {
                Event::Scalar(text, style, ..) => Some(Scalar {
                    text: text.to_string(),
                    style: *style,
                    start: span.start.index(),
                    end: span.end.index(),
                    indent: span.indent,
                }),
                _ => None,
            };
            match event {
                // Stream markers, and events a later parser may add.
                Event::StreamStart | Event::StreamEnd => {}
                Event::DocumentStart(..) => {
                    let mut started = YamlDocument::default();
                    started.comments.append(&mut pending_comments);
                    document = Some(started);
                    frames.clear();
                }
                Event::DocumentEnd => index.documents.extend(document.take()),
                Event::Comment(text, _) => {
                    let comment = Comment {
                        text: text.to_string(),
                        range,
                    };
                    match document.as_mut() {
                        Some(document) => document.comments.push(comment),
                        None => pending_comments.push(comment),
                    }
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    if let (Some(document), Some(frame)) = (document.as_mut(), frames.pop()) {
                        let (Frame::Mapping { node, .. } | Frame::Sequence { node, .. }) = frame;
                        document.nodes[node].value.end = range.end;
                    }
                }
                Event::Scalar(..)
                | Event::MappingStart(..)
                | Event::SequenceStart(..)
                | Event::Alias(..)
                | Event::UnresolvedAlias(..)
                | Event::Anchor(..) => {
                    let Some(document) = document.as_mut() else {
                        continue;
                    };
                    if matches!(event, Event::Anchor(..)) {
                        continue;
                    }
                    let collection = match event {
                        Event::MappingStart(..) => Some(true),
                        Event::SequenceStart(..) => Some(false),
                        _ => None,
                    };
                    // A key: remembered until its value comes. A key that is a collection (rare,
                    // and no Kubernetes object has one) is indexed as if it were a value.
                    if let Some(Frame::Mapping {
                        key: key @ None, ..
                    }) = frames.last_mut()
                        && let Some(scalar) = &scalar
                    {
                        *key = Some((scalar.text.clone(), range));
                        continue;
                    }
                    let (path, key) = match frames.last_mut() {
                        None => (Vec::new(), None),
                        Some(Frame::Mapping { node, key }) => {
                            let (name, key_range) = key.take().unwrap_or_default();
                            let mut path = document.nodes[*node].path.clone();
                            path.push(Step::Key(name));
                            (path, Some(key_range))
                        }
                        Some(Frame::Sequence { node, next }) => {
                            let mut path = document.nodes[*node].path.clone();
                            path.push(Step::Index(*next));
                            *next += 1;
                            (path, None)
                        }
                    };
                    document.nodes.push(Node {
                        path,
                        key,
                        value: range,
                        scalar,
                    });
                    let node = document.nodes.len() - 1;
                    match collection {
                        Some(true) => frames.push(Frame::Mapping { node, key: None }),
                        Some(false) => frames.push(Frame::Sequence { node, next: 0 }),
                        None => {}
                    }
                }
                _ => {}
            }
        }
        index.documents.extend(document);
        if let Some(last) = index.documents.last_mut() {
            last.comments.append(&mut pending_comments);
        }
        Ok(index)
    }

    pub(crate) fn documents(&self) -> &[YamlDocument] {
        &self.documents
    }

    #[cfg(test)]
    /// The documents that hold something, in order: the ones [`super::parse_documents`]
    /// returns values of.
    pub(crate) fn non_empty(&self) -> impl Iterator<Item = &YamlDocument> {
        self.documents
            .iter()
            .filter(|document| !document.is_empty())
    }

    /// The position of a character offset in the file.
    fn position(&self, offset: usize) -> Position {
        let line = self
            .line_starts
            .partition_point(|start| *start <= offset)
            .saturating_sub(1);
        Position {
            line: line as u32,
            column: (offset - self.line_starts[line]) as u32,
        }
    }

    /// For each character of a scalar's value, and for its end, the offset in the file of the
    /// character it came from. Value and source are walked together: a character the two share
    /// is paired; a line break or space that only the value has was made by folding lines and
    /// sits where the source's line break is; an escape is the character it makes; indentation
    /// and quotes that only the source has are skipped.
    fn origins(&self, scalar: &Scalar) -> Vec<usize> {
        let end = scalar.end.min(self.chars.len());
        let block = matches!(scalar.style, ScalarStyle::Literal | ScalarStyle::Folded);
        let mut origins = Vec::with_capacity(scalar.text.len() + 1);
        let mut at = scalar.start;
        let mut line_start = false;
        for wanted in scalar.text.chars() {
            loop {
                if at >= end {
                    origins.push(end);
                    break;
                }
                if line_start {
                    line_start = false;
                    let mut skipped = 0;
                    while at < end
                        && matches!(self.chars[at], ' ' | '\t')
                        && (!block || skipped < scalar.indent.unwrap_or(0))
                    {
                        at += 1;
                        skipped += 1;
                    }
                    continue;
                }
                let source = self.chars[at];
                // An escape makes one character of the value (or none: `\` ending a line).
                if source == '\\' && scalar.style == ScalarStyle::DoubleQuoted {
                    let length = match self.chars.get(at + 1) {
                        Some('\n') => {
                            at += 2;
                            line_start = true;
                            continue;
                        }
                        Some('x') => 4,
                        Some('u') => 6,
                        Some('U') => 10,
                        _ => 2,
                    };
                    origins.push(at);
                    at += length;
                    break;
                }
                if source == wanted {
                    origins.push(at);
                    at += 1;
                    line_start = source == '\n';
                    break;
                }
                if wanted.is_whitespace() {
                    origins.push(at);
                    break;
                }
                if source == '\n' {
                    at += 1;
                    line_start = true;
                    continue;
                }
                if matches!(source, ' ' | '\t' | '\r' | '"' | '\'') {
                    at += 1;
                    continue;
                }
                origins.push(at);
                at += 1;
                break;
            }
        }
        origins.push(at.min(end));
        origins
    }

    /// Where in the file a place in a scalar's string value is: `line` and `column` 1-based, as
    /// script errors count them. Without a column, the line's first character that is not
    /// white space. `None` for a node that is not a scalar.
    pub(crate) fn file_position(
        &self,
        node: &Node,
        line: u32,
        column: Option<u32>,
    ) -> Option<Position> {
        let scalar = node.scalar.as_ref()?;
        let text: Vec<char> = scalar.text.chars().collect();
        let origins = self.origins(scalar);
        let mut offset = 0;
        for _ in 1..line.max(1) {
            match text[offset..].iter().position(|c| *c == '\n') {
                Some(newline) => offset += newline + 1,
                // A line past the end (an engine's "unexpected end"): the last character.
                None => {
                    let last = text.iter().rposition(|c| !c.is_whitespace()).unwrap_or(0);
                    return Some(self.position(origins[last]));
                }
            }
        }
        let line_end = text[offset..]
            .iter()
            .position(|c| *c == '\n')
            .map_or(text.len(), |newline| offset + newline);
        offset = match column {
            Some(column) => (offset + column.saturating_sub(1) as usize).min(line_end),
            None => text[offset..line_end]
                .iter()
                .position(|c| !c.is_whitespace())
                .map_or(offset, |first| offset + first),
        };
        Some(self.position(origins[offset.min(origins.len() - 1)]))
    }

    /// The character offset in a scalar's string value of a place in the file (an editor's
    /// cursor): the offset of the character there, or of the one after the last character
    /// before it. `None` when `at` is not in the node.
    pub(crate) fn string_offset(&self, node: &Node, at: Position) -> Option<usize> {
        let scalar = node.scalar.as_ref()?;
        if !node.value.contains(at) {
            return None;
        }
        let origins = self.origins(scalar);
        let length = origins.len() - 1;
        let before = origins[..length]
            .iter()
            .rposition(|origin| self.position(*origin) <= at);
        Some(match before {
            None => 0,
            Some(k) if self.position(origins[k]) == at => k,
            Some(k) => (k + 1).min(length),
        })
    }

    /// The text of a line of the file, without its line break.
    pub(crate) fn line_text(&self, line: u32) -> String {
        let Some(start) = self.line_starts.get(line as usize) else {
            return String::new();
        };
        self.chars[*start..]
            .iter()
            .take_while(|c| **c != '\n')
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: u32, column: u32) -> Position {
        Position { line, column }
    }

    const MANIFEST: &str = "\
# a controller
apiVersion: metascript.dev/v1alpha1
kind: DecoratorController
metadata: {name: labeller}
spec:
  hooks:
    sync:
      script:
        language: rhai
        inline: |
          let x = 1;
            let y = request.object;
          #{ labels: #{ a: \"b\" } }
  tests:
  - name: one
  - name: two
---
";

    #[test]
    fn nodes_are_found_by_path_with_their_key_and_value() {
        let index = YamlIndex::parse(MANIFEST).unwrap();
        // The `---` at the end starts an empty document.
        assert_eq!(index.documents().len(), 2);
        assert_eq!(index.non_empty().count(), 1);
        let document = &index.documents()[0];
        let name = document.node("metadata.name").unwrap();
        assert_eq!(name.scalar(), Some("labeller"));
        assert_eq!(name.value.start, at(3, 17));
        let test = document.node("spec.tests[1]").unwrap();
        assert_eq!(test.value.start, at(15, 4));
        assert_eq!(
            document
                .node("spec.tests[1].name")
                .unwrap()
                .key
                .unwrap()
                .start,
            at(15, 4)
        );
        let hook = document.node("spec.hooks.sync").unwrap();
        assert_eq!(hook.key.unwrap().start, at(6, 4));
        assert_eq!(document.comments[0].text, " a controller");
        assert!(!document.is_empty());
    }

    #[test]
    fn a_place_in_a_literal_block_is_the_same_place_in_the_file() {
        let index = YamlIndex::parse(MANIFEST).unwrap();
        let inline = index.documents()[0]
            .node("spec.hooks.sync.script.inline")
            .unwrap();
        assert!(inline.scalar().unwrap().starts_with("let x = 1;\n  let y"));
        // Line 2, column 11 of the script is `request`: line 11, column 20 of the file.
        assert_eq!(index.file_position(inline, 2, Some(11)), Some(at(11, 20)));
        // Without a column: the line's first character.
        assert_eq!(index.file_position(inline, 2, None), Some(at(11, 12)));
        assert_eq!(index.file_position(inline, 3, Some(1)), Some(at(12, 10)));
        // And back: the cursor after `request.` is after the script's `.`.
        let offset = index.string_offset(inline, at(11, 28)).unwrap();
        let text = inline.scalar().unwrap();
        assert!(text[..offset].ends_with("request."), "{}", &text[..offset]);
        // Past the end of the line.
        let offset = index.string_offset(inline, at(11, 35)).unwrap();
        assert!(text[..offset].ends_with("request.object;"));
    }

    #[test]
    fn places_in_flow_and_folded_scalars_follow_their_source() {
        let text = "a: \"x = 1;\\n  y\"\nb: 'it''s' \nc: >\n  one\n  two\nd: plain\n  more\n";
        let index = YamlIndex::parse(text).unwrap();
        let document = &index.documents()[0];
        let a = document.node("a").unwrap();
        assert_eq!(a.scalar(), Some("x = 1;\n  y"));
        assert_eq!(index.file_position(a, 1, Some(5)), Some(at(0, 8)));
        // After the `\n` escape, in the same source line.
        assert_eq!(index.file_position(a, 2, Some(3)), Some(at(0, 14)));
        let b = document.node("b").unwrap();
        assert_eq!(index.file_position(b, 1, Some(4)), Some(at(1, 8)));
        let c = document.node("c").unwrap();
        assert_eq!(c.scalar(), Some("one two\n"));
        assert_eq!(index.file_position(c, 1, Some(5)), Some(at(4, 2)));
        let d = document.node("d").unwrap();
        assert_eq!(d.scalar(), Some("plain more"));
        assert_eq!(index.file_position(d, 1, Some(7)), Some(at(6, 2)));
        // A line past the end is the last character.
        assert_eq!(index.file_position(d, 9, Some(1)), Some(at(6, 5)));
    }

    #[test]
    fn a_comment_right_after_a_script_is_found_and_others_are_not() {
        let text = "\
hooks:
  sync:
    inline: |
      let x = 1;
    #{ labels: x }
  # about finalize
  finalize: {inline: \"x #{}\"}
";
        let index = YamlIndex::parse(text).unwrap();
        let document = &index.documents()[0];
        let sync = document.node("hooks.sync.inline").unwrap();
        let after: Vec<&Comment> = document.comments_after(sync).collect();
        assert_eq!(after.len(), 2, "{after:?}");
        assert_eq!(after[0].text, "{ labels: x }");
        assert_eq!(after[0].range.start, at(4, 4));
        let finalize = document.node("hooks.finalize.inline").unwrap();
        assert_eq!(document.comments_after(finalize).count(), 0);
    }

    #[test]
    fn empty_documents_are_told_apart_and_errors_have_a_place() {
        let index = YamlIndex::parse("---\n---\na: 1\n---\n~\n").unwrap();
        let empty: Vec<bool> = index.documents().iter().map(|d| d.is_empty()).collect();
        assert_eq!(empty, [true, false, true]);
        assert_eq!(index.non_empty().count(), 1);
        let error = YamlIndex::parse("a: 1\nb: [\n").unwrap_err();
        assert_eq!(error.at.line, 1, "{error}");
    }
}
