//! Ports of the seed's managed query service tests (`test_managed_query_service.py`), group
//! "Planning, query store, references": prepare, reopen, the query store projection, opaque
//! references and the service lifecycle. Function names are the seed's; parametrized cases carry
//! the case as a suffix.

mod consent_publication;
mod consent_resolution;
mod crash;
mod desired;
mod fixture;
mod install;
mod planning;
mod process;
mod task_shift;

/// Compile-time "does not implement" assertions (the `static_assertions` `assert_not_impl_any!`
/// pattern): if `$ty` implemented the trait, both blanket impls below would apply and the
/// inferred type parameter would be ambiguous, so the crate would not compile.
macro_rules! assert_not_impl {
    ($ty:ty, $trait_:path) => {
        const _: fn() = || {
            trait AmbiguousIfImpl<A> {
                fn some_item() {}
            }
            impl<T: ?Sized> AmbiguousIfImpl<()> for T {}
            #[allow(dead_code)]
            struct Invalid;
            impl<T: ?Sized + $trait_> AmbiguousIfImpl<Invalid> for T {}
            let _ = <$ty as AmbiguousIfImpl<_>>::some_item;
        };
    };
}
pub(crate) use assert_not_impl;
