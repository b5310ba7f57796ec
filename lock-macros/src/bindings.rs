//! The names a function's parameters bind, which are the names a key template may use.
//!
//! A parameter is a pattern, not just a name: `Path(id): Path<u64>` binds `id`,
//! `(a, b): (u32, u32)` binds `a` and `b`, `Order { id, .. }: Order` binds `id`. A `self`
//! receiver in any form binds `self`.

use syn::{FnArg, Ident, Pat, Signature};

/// Every name the parameters of `sig` bind, in order of appearance.
pub(crate) fn bound_names(sig: &Signature) -> Vec<Ident> {
    let mut names = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(receiver) => {
                names.push(Ident::new("self", receiver.self_token.span));
            }
            FnArg::Typed(typed) => collect(&typed.pat, &mut names),
        }
    }
    names
}

fn collect(pat: &Pat, names: &mut Vec<Ident>) {
    match pat {
        Pat::Ident(binding) => {
            names.push(binding.ident.clone());
            if let Some((_, sub)) = &binding.subpat {
                collect(sub, names);
            }
        }
        Pat::Tuple(tuple) => tuple.elems.iter().for_each(|elem| collect(elem, names)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|elem| collect(elem, names)),
        Pat::Struct(strukt) => strukt
            .fields
            .iter()
            .for_each(|field| collect(&field.pat, names)),
        Pat::Slice(slice) => slice.elems.iter().for_each(|elem| collect(elem, names)),
        Pat::Reference(reference) => collect(&reference.pat, names),
        Pat::Paren(paren) => collect(&paren.pat, names),
        Pat::Type(typed) => collect(&typed.pat, names),
        // Every alternative binds the same names (rustc enforces it), so the first suffices.
        Pat::Or(or) => {
            if let Some(first) = or.cases.first() {
                collect(first, names);
            }
        }
        // Bind nothing: `_`, `..`, literals, ranges, paths, const blocks; macros are opaque.
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(signature: &str) -> Vec<String> {
        let item: syn::ItemFn = syn::parse_str(&format!("{signature} {{}}")).unwrap();
        bound_names(&item.sig)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn plain_parameters() {
        assert_eq!(
            names("async fn f(buyer: &Buyer, item_id: &str, mut seller: u64)"),
            ["buyer", "item_id", "seller"]
        );
        assert!(names("async fn f()").is_empty());
    }

    #[test]
    fn receivers() {
        for receiver in [
            "&self",
            "&mut self",
            "self",
            "mut self",
            "self: Arc<Self>",
            "&'a self",
        ] {
            assert_eq!(
                names(&format!("async fn f({receiver}, x: u8)")),
                ["self", "x"]
            );
        }
    }

    #[test]
    fn patterns() {
        assert_eq!(names("async fn f(Path(id): Path<u64>)"), ["id"]);
        assert_eq!(names("async fn f((a, b): (u32, u32))"), ["a", "b"]);
        assert_eq!(
            names("async fn f(State(AppState { locker, db: store, .. }): State<AppState>)"),
            ["locker", "store"]
        );
        assert_eq!(names("async fn f(&(x, _): &(u8, u8))"), ["x"]);
        assert_eq!(
            names("async fn f([first, .., last]: [u8; 4])"),
            ["first", "last"]
        );
        assert_eq!(
            names("async fn f(whole @ Wrapper(inner): Wrapper)"),
            ["whole", "inner"]
        );
        assert_eq!(
            names("async fn f(ref r: u8, _: u8, (mut m): u8)"),
            ["r", "m"]
        );
        assert_eq!(names("async fn f(r#type: u8)"), ["r#type"]);
    }
}
