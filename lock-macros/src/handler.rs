//! Is the annotated function an HTTP handler? Then it gets the web defaults (no waiting for
//! a busy lock, as `LockLayer`), unless the attribute says `wait`.
//!
//! A function is a handler when one of its parameters is an axum extractor: its type's last
//! path segment is one of the extractor names below, with type arguments where the
//! extractor has them (`State<App>`, `Path<u64>`, `Json<Order>`). Only the type's name is
//! seen (a macro knows no types), so a function of your own that takes a type named like an
//! extractor counts as a handler too; give it a `wait` to say otherwise.

use syn::{FnArg, GenericArgument, PathArguments, Signature, Type};

/// Extractors that carry a type argument.
const GENERIC: [&str; 9] = [
    "State",
    "Path",
    "Json",
    "Query",
    "Form",
    "Extension",
    "ConnectInfo",
    "TypedHeader",
    "Request",
];

/// Extractors without one.
const PLAIN: [&str; 6] = [
    "HeaderMap",
    "MatchedPath",
    "OriginalUri",
    "RawQuery",
    "Multipart",
    "WebSocketUpgrade",
];

/// True when a parameter of `sig` is an axum extractor.
pub(crate) fn is_http_handler(sig: &Signature) -> bool {
    sig.inputs.iter().any(|input| match input {
        FnArg::Typed(typed) => is_extractor(&typed.ty),
        FnArg::Receiver(_) => false,
    })
}

fn is_extractor(ty: &Type) -> bool {
    let Type::Path(path) = ty else {
        return false;
    };
    let Some(last) = path.path.segments.last() else {
        return false;
    };
    let name = last.ident.to_string();
    let has_type_argument = match &last.arguments {
        PathArguments::AngleBracketed(args) => args
            .args
            .iter()
            .any(|arg| matches!(arg, GenericArgument::Type(_))),
        _ => false,
    };
    (has_type_argument && GENERIC.contains(&name.as_str())) || PLAIN.contains(&name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handler(sig: &str) -> bool {
        let sig: Signature = syn::parse_str(sig).expect("signature");
        is_http_handler(&sig)
    }

    #[test]
    fn extractor_parameters_make_a_handler() {
        assert!(handler(
            "async fn pay(State(app): State<App>, Path(id): Path<u64>) -> R"
        ));
        assert!(handler(
            "async fn pay(axum::extract::Json(order): axum::extract::Json<Order>) -> R"
        ));
        assert!(handler(
            "async fn hook(headers: HeaderMap, body: String) -> R"
        ));
        assert!(handler("async fn pay(state: State<App>) -> R"));
    }

    #[test]
    fn business_functions_are_not_handlers() {
        assert!(!handler(
            "async fn purchase(&self, buyer: u64, item_id: &str) -> R"
        ));
        assert!(!handler("async fn open(path: &Path, name: String) -> R"));
        assert!(!handler("async fn open(path: std::path::PathBuf) -> R"));
        // A type named like an extractor but without its type argument.
        assert!(!handler("async fn load(state: State) -> R"));
        assert!(!handler(
            "async fn settle(order: Order, store: Arc<Store>) -> R"
        ));
    }
}
