//! `#[kernel]`: the attribute of `ibp_kernels::prelude` that turns a Rust
//! function into a kernel entry point for rustc's NVPTX backend.
//!
//! ```ignore
//! use ibp_kernels::prelude::*;
//!
//! #[kernel]
//! pub unsafe fn add_one(x: *mut f32, n: u32) { /* … */ }
//! ```
//!
//! becomes
//!
//! ```ignore
//! #[cfg(target_arch = "nvptx64")]
//! #[unsafe(no_mangle)]
//! pub unsafe extern "ptx-kernel" fn add_one(x: *mut f32, n: u32) { /* … */ }
//! ```
//!
//! a `.entry add_one` in the PTX, under its own name, which the host loads
//! with `Module::get_function("add_one")`. The crate using it enables
//! `#![feature(abi_ptx)]` on nvptx64 (the ABI is still unstable there).
//!
//! Q: why no `syn`?
//! A: the rewrite is three token insertions in front of the `fn` keyword;
//! a parser would add two crates to every kernel build for nothing.

use proc_macro::{Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree};

/// Make `fn` a kernel entry point: `#[unsafe(no_mangle)] extern
/// "ptx-kernel"`, compiled for `nvptx64` only (on the host the function
/// does not exist, as with `cuda_std`'s `#[kernel]`).
///
/// The function must be `pub`, return nothing, take `Copy` arguments
/// (`#[repr(C)]` structs, integers, pointers) and not be generic; the
/// compiler reports anything else at the function.
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    if let Some(t) = attr.into_iter().next() {
        return error(t.span(), "#[kernel] takes no arguments");
    }
    let mut out: Vec<TokenTree> = Vec::new();
    let mut seen_fn = false;
    let mut seen_extern = false;
    for t in item {
        if let TokenTree::Ident(i) = &t {
            let s = i.to_string();
            if s == "extern" && !seen_fn {
                seen_extern = true;
            }
            if s == "fn" && !seen_fn {
                seen_fn = true;
                if !seen_extern {
                    out.push(TokenTree::Ident(Ident::new("extern", i.span())));
                    out.push(TokenTree::Literal(Literal::string("ptx-kernel")));
                }
            }
        }
        out.push(t);
    }
    if !seen_fn {
        return error(Span::call_site(), "#[kernel] applies to a function");
    }
    let mut attrs = attribute("cfg(target_arch = \"nvptx64\")");
    attrs.extend(attribute("unsafe(no_mangle)"));
    attrs.extend(out);
    attrs
}

/// `#[TEXT]` as tokens.
fn attribute(text: &str) -> TokenStream {
    let inner: TokenStream = text.parse().expect("a fixed, valid attribute");
    [
        TokenTree::Punct(Punct::new('#', Spacing::Alone)),
        TokenTree::Group(Group::new(Delimiter::Bracket, inner)),
    ]
    .into_iter()
    .collect()
}

/// `compile_error!(msg)` at `span`.
fn error(span: Span, msg: &str) -> TokenStream {
    let mut t: TokenStream = format!("compile_error!({msg:?});").parse().expect("valid");
    t = t
        .into_iter()
        .map(|mut tt| {
            tt.set_span(span);
            tt
        })
        .collect();
    t
}
