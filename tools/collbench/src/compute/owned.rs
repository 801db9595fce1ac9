//! One owner per library handle. A cuBLASLt matrix layout, matmul descriptor or preference is
//! a raw pointer the library frees when told to; copying the pointer into a second struct that
//! also frees it is a double free (the H200's fp8 abort: a plan rebuilt with `..plan` kept the
//! old one's layouts, and both were dropped). An [`Owned`] is neither `Copy` nor `Clone`, so a
//! handle has exactly one owner and is destroyed once, when that owner drops.

/// A handle of type `H` and the function that destroys it, called once on drop.
pub struct Owned<H: Copy> {
    raw: H,
    destroy: fn(H),
}

impl<H: Copy> Owned<H> {
    /// Takes ownership of `raw`.
    ///
    /// # Safety
    /// `raw` was created by the library and nothing else destroys it: `destroy` will.
    pub unsafe fn new(raw: H, destroy: fn(H)) -> Owned<H> {
        Owned { raw, destroy }
    }

    /// A creation's result, owned when it succeeded.
    ///
    /// # Safety
    /// As [`Owned::new`], for the handle in `created`.
    pub unsafe fn created<E>(created: Result<H, E>, destroy: fn(H)) -> Result<Owned<H>, E> {
        // SAFETY: the caller's promise, passed on.
        created.map(|raw| unsafe { Owned::new(raw, destroy) })
    }

    /// The raw handle, for a call into the library; it stays owned here.
    pub fn raw(&self) -> H {
        self.raw
    }
}

impl<H: Copy> Drop for Owned<H> {
    fn drop(&mut self) {
        (self.destroy)(self.raw);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::RefCell;

    thread_local! {
        /// Handles destroyed on this test's thread, in order.
        pub(crate) static DESTROYED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    }

    /// A destroy function that records what it was given.
    pub(crate) fn record(h: usize) {
        DESTROYED.with(|d| d.borrow_mut().push(h));
    }

    pub(crate) fn destroyed() -> Vec<usize> {
        DESTROYED.with(|d| d.borrow().clone())
    }

    #[test]
    fn a_handle_is_destroyed_once_when_its_one_owner_drops() {
        // SAFETY: stand-in handles; `record` destroys nothing.
        let a = unsafe { Owned::new(1usize, record) };
        let moved = a;
        assert_eq!(moved.raw(), 1);
        assert!(destroyed().is_empty(), "moving an owner destroys nothing");
        drop(moved);
        assert_eq!(destroyed(), vec![1]);
    }

    #[test]
    fn a_failed_creation_owns_nothing() {
        // SAFETY: as above.
        let none = unsafe { Owned::created(Err::<usize, &str>("no FP8 here"), record) };
        assert!(none.is_err());
        // SAFETY: as above.
        let some = unsafe { Owned::created(Ok::<usize, &str>(7), record) }.unwrap();
        drop(some);
        assert_eq!(destroyed(), vec![7]);
    }
}
