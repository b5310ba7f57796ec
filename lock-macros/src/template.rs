//! The `key = ".."` template: literal text plus `{param}` / `{param.field.sub}` placeholders.
//!
//! The scanner only reads the string; whether a placeholder's first name is really a
//! parameter is checked later against [`crate::bindings`]. Stable Rust cannot point inside a
//! string literal, so every error and every generated placeholder expression carries the
//! literal's span: the user sees the whole template underlined.

use proc_macro2::{Span, TokenStream};
use quote::{quote_spanned, ToTokens};
use syn::{Ident, Index, LitStr, Member};

/// A scanned template.
#[derive(Debug)]
pub(crate) struct Template {
    pub pieces: Vec<Piece>,
    /// The span of the user's string literal.
    pub span: Span,
}

#[derive(Debug, PartialEq)]
pub(crate) enum Piece {
    /// Text copied into the key as is (`{{` and `}}` already turned into single braces).
    Text(String),
    /// `{root.member.member}`: formatted with `Display`.
    Field(FieldPath),
}

/// `root.member.member` as written in a placeholder.
#[derive(Debug, PartialEq)]
pub(crate) struct FieldPath {
    /// A parameter name, or `self`.
    pub root: Ident,
    pub members: Vec<Member>,
}

impl FieldPath {
    /// The placeholder as the user wrote it, for messages.
    pub fn text(&self) -> String {
        let mut text = self.root.to_string();
        for member in &self.members {
            text.push('.');
            match member {
                Member::Named(ident) => text.push_str(&ident.to_string()),
                Member::Unnamed(index) => text.push_str(&index.index.to_string()),
            }
        }
        text
    }
}

impl ToTokens for FieldPath {
    /// `root.a.b`, every token spanned on the template so type errors (say, a field that is
    /// not `Display`) point at it.
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let root = &self.root;
        let members = &self.members;
        tokens.extend(quote_spanned!(root.span()=> #root #(. #members)*));
    }
}

impl Template {
    /// Scans the literal of `key = ".."`.
    pub fn scan(lit: &LitStr) -> syn::Result<Template> {
        let span = lit.span();
        let pieces = scan_str(&lit.value(), span).map_err(|msg| syn::Error::new(span, msg))?;
        Ok(Template { pieces, span })
    }

    pub fn placeholders(&self) -> impl Iterator<Item = &FieldPath> {
        self.pieces.iter().filter_map(|piece| match piece {
            Piece::Field(path) => Some(path),
            Piece::Text(_) => None,
        })
    }

    /// Errors for placeholders whose first name no parameter binds, one per placeholder.
    pub fn check_names(&self, names: &[Ident]) -> Option<syn::Error> {
        let known: Vec<String> = names.iter().map(ToString::to_string).collect();
        let mut errors = crate::errors::Errors::default();
        for path in self.placeholders() {
            let root = path.root.to_string();
            if known.contains(&root) {
                continue;
            }
            let listed = if known.is_empty() {
                "the function has no parameters".to_owned()
            } else {
                let names: Vec<String> = known.iter().map(|name| format!("`{name}`")).collect();
                format!("the function's parameters are {}", names.join(", "))
            };
            let msg = if root == "self" {
                format!(
                    "`{{{}}}` in the key, but the function has no `self` receiver; {listed}",
                    path.text()
                )
            } else {
                let hint = crate::suggest::closest(&root, known.iter().map(String::as_str))
                    .map(|close| format!("did you mean `{close}`? "))
                    .unwrap_or_default();
                format!(
                    "unknown name `{root}` in key placeholder `{{{}}}`: {hint}placeholders start with a parameter name; {listed}",
                    path.text()
                )
            };
            errors.push(syn::Error::new(self.span, msg));
        }
        errors.finish()
    }

    /// Gives each placeholder's first name the hygiene of the parameter it names (still
    /// located at the template, for messages): a template passed through `macro_rules!`
    /// carries the span of the macro's caller, while the parameters may come from the
    /// macro's body, and a name resolves only in its own hygiene context.
    pub fn bind(&mut self, names: &[Ident]) {
        for piece in &mut self.pieces {
            let Piece::Field(path) = piece else { continue };
            if let Some(param) = names.iter().find(|name| **name == path.root) {
                let at = path.root.span();
                path.root.set_span(param.span().located_at(at));
            }
        }
    }

    /// True when the key is all text: it needs no formatting.
    pub fn is_constant(&self) -> bool {
        self.placeholders().next().is_none()
    }

    /// The `format!` string: text with braces escaped again, `{}` per placeholder.
    pub fn format_string(&self) -> LitStr {
        let mut format = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => format.push_str(&text.replace('{', "{{").replace('}', "}}")),
                Piece::Field(_) => format.push_str("{}"),
            }
        }
        LitStr::new(&format, self.span)
    }

    /// The key itself, when it is all text.
    pub fn constant_text(&self) -> LitStr {
        let mut text = String::new();
        for piece in &self.pieces {
            if let Piece::Text(part) = piece {
                text.push_str(part);
            }
        }
        LitStr::new(&text, self.span)
    }
}

/// Splits `text` into pieces. Errors are sentences for the user; `span` goes on the names.
pub(crate) fn scan_str(text: &str, span: Span) -> Result<Vec<Piece>, String> {
    if text.is_empty() {
        return Err(
            "the key is empty; name what the lock protects, e.g. key = \"orders:{order_id}\""
                .to_owned(),
        );
    }
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '{' if chars.next_if(|&(_, next)| next == '{').is_some() => literal.push('{'),
            '}' if chars.next_if(|&(_, next)| next == '}').is_some() => literal.push('}'),
            '{' => {
                let rest = &text[at + 1..];
                let Some(len) = rest
                    .find(['{', '}'])
                    .filter(|&i| rest.as_bytes()[i] == b'}')
                else {
                    return Err(format!(
                        "unclosed `{{` in key template {text:?}: close the placeholder with `}}`, or write `{{{{` for a literal brace"
                    ));
                };
                let inner = &rest[..len];
                // Skip the placeholder and its closing brace.
                while chars.next_if(|&(i, _)| i <= at + 1 + len).is_some() {}
                if !literal.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut literal)));
                }
                pieces.push(Piece::Field(placeholder(inner, span)?));
            }
            '}' => {
                return Err(format!(
                    "unmatched `}}` in key template {text:?}: write `}}}}` for a literal brace"
                ))
            }
            _ => literal.push(c),
        }
    }
    if !literal.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    Ok(pieces)
}

/// Reads what sits between `{` and `}`.
fn placeholder(inner: &str, span: Span) -> Result<FieldPath, String> {
    if inner.is_empty() {
        return Err(
            "empty `{}` in key template: name a parameter inside the braces, e.g. `{order_id}`"
                .to_owned(),
        );
    }
    if let Some((name, _)) = inner.split_once(':') {
        return Err(format!(
            "`{{{inner}}}`: format specs are not supported in key templates; values are formatted with `Display`, write `{{{name}}}`"
        ));
    }
    if inner.trim() != inner {
        return Err(format!(
            "`{{{inner}}}`: remove the spaces, write `{{{}}}`",
            inner.trim()
        ));
    }
    if let Some(open) = inner.find('(') {
        let called = inner[..open].rsplit('.').next().unwrap_or_default();
        return Err(format!(
            "`{{{inner}}}`: key templates reach into fields only and cannot call methods \
             (`{called}()`) or evaluate expressions; compute the value before the call and pass \
             it as a parameter of its own, named in the template (`{{{called}}}`), or take the \
             lock inside the body with `Locker::lock`"
        ));
    }
    let mut segments = inner.split('.');
    let first = segments.next().unwrap_or_default();
    if !first.is_empty() && first.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`{{{inner}}}`: positional placeholders are not supported; name a parameter, e.g. `{{order_id}}`"
        ));
    }
    let invalid = || {
        format!(
            "`{{{inner}}}` is not a placeholder: write a parameter name, optionally followed by fields, e.g. `{{order.id}}`"
        )
    };
    // The Rust lexer skips comments and whitespace, invisible marks included (`{a/*x*/}`
    // lexes as `a`): refuse them rather than drop them. (Not `ident == segment`: rustc
    // NFC-normalizes identifiers, and a decomposed name in the key must still match.)
    let name = |segment: &str| {
        let trivia =
            |c: char| c == '/' || c.is_whitespace() || matches!(c, '\u{200e}' | '\u{200f}');
        if segment.contains(trivia) {
            return Err(invalid());
        }
        let mut ident = syn::parse_str::<Ident>(segment).map_err(|_| {
            // `{type}` for a parameter `r#type`: a keyword is written raw.
            if syn::parse_str::<Ident>(&format!("r#{segment}")).is_ok() {
                format!(
                    "`{{{inner}}}`: `{segment}` is a keyword; a parameter named `r#{segment}` is written `{{{}}}` in the key",
                    inner.replacen(segment, &format!("r#{segment}"), 1)
                )
            } else {
                invalid()
            }
        })?;
        ident.set_span(span);
        Ok(ident)
    };
    let root = if first == "self" {
        Ident::new("self", span)
    } else {
        name(first)?
    };
    let members = segments
        .map(|segment| {
            if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
                // Rust has no `pair.01`.
                if segment.len() > 1 && segment.starts_with('0') {
                    return Err(invalid());
                }
                let index = segment.parse().map_err(|_| invalid())?;
                return Ok(Member::Unnamed(Index { index, span }));
            }
            // Resolved as the macro's own tokens (still located at the template): a field
            // that does not exist is rustc's "no field" error at the template, without its
            // suggestion to replace the whole template with the field's name.
            let mut field = name(segment)?;
            field.set_span(span.resolved_at(Span::mixed_site()));
            Ok(Member::Named(field))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(FieldPath { root, members })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(text: &str) -> Result<Vec<Piece>, String> {
        scan_str(text, Span::call_site())
    }

    fn text(piece: &Piece) -> String {
        match piece {
            Piece::Text(text) => format!("T({text})"),
            Piece::Field(path) => format!("F({})", path.text()),
        }
    }

    fn shape(template: &str) -> Vec<String> {
        scan(template).unwrap().iter().map(text).collect()
    }

    #[test]
    fn text_and_placeholders() {
        assert_eq!(shape("market:{item_id}"), ["T(market:)", "F(item_id)"]);
        assert_eq!(shape("{a}{b}"), ["F(a)", "F(b)"]);
        assert_eq!(shape("{a}:{b}:x"), ["F(a)", "T(:)", "F(b)", "T(:x)"]);
        assert_eq!(shape("plain"), ["T(plain)"]);
    }

    #[test]
    fn fields_self_and_tuple_indexes() {
        assert_eq!(shape("{self.id}"), ["F(self.id)"]);
        assert_eq!(
            shape("o:{order.customer.id}"),
            ["T(o:)", "F(order.customer.id)"]
        );
        assert_eq!(shape("{pair.0}"), ["F(pair.0)"]);
        assert_eq!(shape("{r#type}"), ["F(r#type)"]);
        assert_eq!(shape("{ü}"), ["F(ü)"]);
    }

    #[test]
    fn doubled_braces_are_literal() {
        assert_eq!(shape("{{x}}"), ["T({x})"]);
        assert_eq!(shape("a{{{b}}}c"), ["T(a{)", "F(b)", "T(}c)"]);
    }

    #[test]
    fn format_string_escapes_text_braces() {
        let lit = LitStr::new("a{{{b}}}:{c.d}", Span::call_site());
        let template = Template::scan(&lit).unwrap();
        assert_eq!(template.format_string().value(), "a{{{}}}:{}");
        assert!(!template.is_constant());
        let constant = Template::scan(&LitStr::new("x{{y}}", Span::call_site())).unwrap();
        assert!(constant.is_constant());
        assert_eq!(constant.constant_text().value(), "x{y}");
    }

    #[test]
    fn malformed_templates() {
        let cases = [
            ("", "key is empty"),
            ("a{b", "unclosed `{`"),
            ("a{b{c}", "unclosed `{`"),
            ("{", "unclosed `{`"),
            ("a}b", "unmatched `}`"),
            ("{a}}", "unmatched `}`"),
            ("{}", "empty `{}`"),
            ("{x:?}", "format specs are not supported"),
            ("{x:>5}", "write `{x}`"),
            ("{ x }", "remove the spaces"),
            ("{0}", "positional"),
            ("{a.}", "is not a placeholder"),
            // An empty first segment is not a position (found by `properties::empty_segment`).
            ("{.a}", "is not a placeholder"),
            ("{._0}", "is not a placeholder"),
            ("{.0}", "is not a placeholder"),
            ("{.}", "is not a placeholder"),
            // What the Rust lexer skips is not part of a name (`properties::lexer_trivia`).
            ("{a/**/}", "is not a placeholder"),
            ("{/* x */a}", "is not a placeholder"),
            ("{a //x}", "is not a placeholder"),
            ("{a.b/**/}", "is not a placeholder"),
            ("{a\u{200e}}", "is not a placeholder"),
            ("{pair.01}", "is not a placeholder"),
            ("{a..b}", "is not a placeholder"),
            ("{a-b}", "is not a placeholder"),
            ("{a.self}", "is not a placeholder"),
            ("{type}", "a parameter named `r#type` is written `{r#type}`"),
            ("{Self}", "is not a placeholder"),
            ("{user.name.len()}", "cannot call methods (`len()`)"),
            ("{a.get(0).b}", "pass it as a parameter of its own"),
        ];
        for (template, expected) in cases {
            let err = scan(template).unwrap_err();
            assert!(err.contains(expected), "{template:?}: {err}");
        }
    }

    #[test]
    fn field_path_tokens() {
        let pieces = scan("{order.customer.0}").unwrap();
        let Piece::Field(path) = &pieces[0] else {
            panic!("not a field")
        };
        assert_eq!(path.to_token_stream().to_string(), "order . customer . 0");
    }

    #[test]
    fn unknown_names_list_the_parameters() {
        let span = Span::call_site();
        let names = [Ident::new("buyer", span), Ident::new("item_id", span)];
        let template =
            Template::scan(&LitStr::new("m:{itme_id}:{buyer.id}:{self.x}", span)).unwrap();
        let errors: Vec<String> = template
            .check_names(&names)
            .unwrap()
            .into_iter()
            .map(|err| err.to_string())
            .collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].contains("unknown name `itme_id`"),
            "{}",
            errors[0]
        );
        assert!(
            errors[0].contains("did you mean `item_id`?"),
            "{}",
            errors[0]
        );
        assert!(
            errors[0].contains("parameters are `buyer`, `item_id`"),
            "{}",
            errors[0]
        );
        assert!(errors[1].contains("no `self` receiver"), "{}", errors[1]);
        let fine = Template::scan(&LitStr::new("m:{item_id}", span)).unwrap();
        assert!(fine.check_names(&names).is_none());
    }
}
