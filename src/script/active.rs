//! The call the current thread is running, for the callbacks of both engines.
//!
//! Helpers, `print`, and Rhai's progress callback are installed once (per Rhai engine, per Luau
//! state) but serve one call at a time, and a call runs entirely on the thread that started it;
//! so the per-call parts (helper environment, budget, the request's unconverted fields) live in a
//! thread-local for the duration of the call instead of being rebound on every call.

use super::helper_env::HelperEnv;
use super::limits::Budget;
use super::{HookRequest, Json};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::marker::PhantomData;
use std::sync::Arc;

/// The top-level fields of `request` a script may read as script values (found from its
/// source by [`super::request_use`]); the rest stay JSON, read by helpers in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RequestUse {
    All,
    Fields(BTreeSet<String>),
}

impl RequestUse {
    /// Whether `field` is converted into the script's `request`.
    pub(super) fn converts(&self, field: &str) -> bool {
        match self {
            RequestUse::All => true,
            RequestUse::Fields(fields) => fields.contains(field),
        }
    }
}

struct ActiveCall {
    env: HelperEnv,
    budget: Arc<Budget>,
    request: Option<RawRequest>,
}

/// [`Request`] without its lifetime; only dereferenced while the guard that stored it lives.
#[derive(Clone, Copy)]
struct RawRequest {
    id: usize,
    json: Erased,
    converted: *const RequestUse,
}

/// A [`HookRequest`] with its lifetime erased, read back only through the `unsafe`
/// [`Erased::get`].
#[derive(Clone, Copy)]
struct Erased(HookRequest<'static>);

impl Erased {
    fn new(request: HookRequest<'_>) -> Erased {
        // SAFETY: only the lifetime changes, and nothing reads the value but `get`.
        Erased(unsafe { std::mem::transmute::<HookRequest<'_>, HookRequest<'static>>(request) })
    }

    /// # Safety
    /// What the request borrows must still live for `'b`.
    unsafe fn get<'b>(self) -> HookRequest<'b> {
        self.0
    }
}

thread_local! {
    static ACTIVE: RefCell<Option<ActiveCall>> = const { RefCell::new(None) };
}

/// The request of a call whose script was given only some of its fields (`request_use`).
pub(crate) struct Request<'a> {
    /// The address of the script's `request` value (a Lua table, the map inside a Rhai value),
    /// by which readers recognise it.
    pub id: usize,
    pub json: HookRequest<'a>,
    pub converted: &'a RequestUse,
}

impl<'a> Request<'a> {
    /// The request of a call, when the script was given only some of its fields.
    pub(super) fn partial(
        id: usize,
        json: HookRequest<'a>,
        converted: &'a RequestUse,
    ) -> Option<Request<'a>> {
        match (json.is_object(), converted) {
            (true, RequestUse::Fields(_)) => Some(Request {
                id,
                json,
                converted,
            }),
            _ => None,
        }
    }
}

/// The fields of the active call's request that the script was not given.
pub(crate) struct Unconverted<'a> {
    json: HookRequest<'a>,
    converted: &'a RequestUse,
}

impl<'a> Unconverted<'a> {
    /// The fields the script was not given.
    fn entries(&self) -> Vec<(&'a str, Json<'a>)> {
        let mut fields = self.json.fields().unwrap_or_default();
        fields.retain(|(key, _)| !self.converted.converts(key));
        fields
    }

    /// The names of the fields the script was not given.
    pub(super) fn fields(&self) -> impl Iterator<Item = &'a str> {
        self.entries().into_iter().map(|(key, _)| key)
    }

    /// What a reader finds at `path` in the script's `request`, which holds only the fields the
    /// script reads itself: those are read by `walk` in the engine's values, the others from the
    /// JSON they would have been converted from. `whole` is the script's value as JSON.
    pub(super) fn read<E>(
        &self,
        path: &[String],
        whole: impl FnOnce() -> Result<Value, E>,
        walk: impl FnOnce(&[String]) -> Result<Option<Value>, E>,
    ) -> Result<Option<Value>, E> {
        let Some((first, rest)) = path.split_first() else {
            let mut whole = whole()?;
            if let Value::Object(fields) = &mut whole {
                let unconverted = self.entries().into_iter();
                fields.extend(unconverted.map(|(k, v)| (k.to_owned(), v.tree().into_owned())));
            }
            return Ok(Some(whole));
        };
        if self.converted.converts(first) {
            walk(path)
        } else {
            Ok(self.json.get(first).and_then(|value| value.at(rest)))
        }
    }
}

/// Makes a call active on this thread until dropped, restoring the previous one (none in
/// practice) even if the evaluation unwinds.
pub(crate) struct ActiveGuard<'a> {
    previous: Option<ActiveCall>,
    request: PhantomData<&'a Value>,
}

impl<'a> ActiveGuard<'a> {
    pub(super) fn enter(
        env: HelperEnv,
        budget: Arc<Budget>,
        request: Option<Request<'a>>,
    ) -> ActiveGuard<'a> {
        let call = ActiveCall {
            env,
            budget,
            request: request.map(|r| RawRequest {
                id: r.id,
                json: Erased::new(r.json),
                converted: r.converted,
            }),
        };
        ActiveGuard {
            previous: ACTIVE.with(|a| a.borrow_mut().replace(call)),
            request: PhantomData,
        }
    }
}

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        let previous = self.previous.take();
        ACTIVE.with(|a| *a.borrow_mut() = previous);
    }
}

/// Runs `f` with the active call's environment and budget; `None` outside a call.
pub(crate) fn with_active<R>(f: impl FnOnce(&HelperEnv, &Budget) -> R) -> Option<R> {
    ACTIVE.with(|a| a.borrow().as_ref().map(|call| f(&call.env, &call.budget)))
}

/// Runs `f` with the unconverted fields of the active call's request if `id` is the address of
/// its `request` value, else with `None`.
pub(crate) fn with_unconverted<R>(id: usize, f: impl FnOnce(Option<Unconverted<'_>>) -> R) -> R {
    let request = ACTIVE.with(|a| {
        a.borrow()
            .as_ref()
            .and_then(|call| call.request)
            .filter(|request| request.id == id)
    });
    // SAFETY: a `RawRequest` is stored by `ActiveGuard::enter` from references that outlive the
    // guard, and removed when the guard drops; this runs on the thread that holds the guard,
    // during the call, so the guard (and the references) are alive for all of `f`.
    let unconverted = request.map(|request| unsafe {
        Unconverted {
            json: request.json.get(),
            converted: &*request.converted,
        }
    });
    f(unconverted)
}
