//! Argument values as `macro_rules!` passes them: a `$x:literal` or `$x:expr` arrives
//! wrapped in an invisible (None-delimited) group, which the parsers see through.

use syn::Expr;

/// `value` without the invisible groups `macro_rules!` puts around a `$x:literal` or
/// `$x:expr` (and without parentheses around a literal: `key = ($key)`).
pub(crate) fn ungroup(value: Expr) -> Expr {
    match value {
        Expr::Group(group) => ungroup(*group.expr),
        Expr::Paren(paren) if matches!(*paren.expr, Expr::Lit(_) | Expr::Group(_)) => {
            ungroup(*paren.expr)
        }
        other => other,
    }
}
