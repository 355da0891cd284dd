//! Opaque page cursors: `page_<base64url(JSON)>` carrying the list order, the position and
//! the direction. A cursor reused with another `order` is refused, as the official API does.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use gateway_store::{Keyset, Order, Page, PageCursor, PageRequest};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::extract::QueryParams;

#[derive(Serialize, Deserialize)]
struct Body {
    /// "asc" or "desc".
    o: String,
    a: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    i: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    b: bool,
}

fn order_name(o: Order) -> &'static str {
    match o {
        Order::Asc => "asc",
        Order::Desc => "desc",
    }
}

pub fn encode(order: Order, c: &PageCursor) -> String {
    let body = Body { o: order_name(order).into(), a: c.key.at, i: c.key.id.clone(), b: c.backward };
    let json = serde_json::to_vec(&body).unwrap_or_default();
    format!("page_{}", URL_SAFE_NO_PAD.encode(json))
}

pub fn decode(s: &str, order: Order) -> Result<PageCursor, ApiError> {
    let bad = || {
        ApiError::invalid(format!(
            "page {:?} is not a cursor this gateway issued",
            s.chars().take(64).collect::<String>()
        ))
    };
    let raw = s.strip_prefix("page_").ok_or_else(bad)?;
    if raw.len() > 1024 {
        return Err(bad());
    }
    let bytes = URL_SAFE_NO_PAD.decode(raw).map_err(|_| bad())?;
    let body: Body = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if body.o != order_name(order) {
        return Err(ApiError::invalid(format!(
            "this page cursor was issued for order={}, not order={}",
            body.o,
            order_name(order)
        )));
    }
    Ok(PageCursor { key: Keyset { at: body.a, id: body.i }, backward: body.b })
}

/// `order`, `limit` and `page` from the query.
pub fn request(
    q: &QueryParams,
    default_order: Order,
    default_limit: u32,
    max_limit: u32,
) -> Result<PageRequest, ApiError> {
    let order = match q.get("order") {
        None | Some("") => default_order,
        Some("asc") => Order::Asc,
        Some("desc") => Order::Desc,
        Some(o) => return Err(ApiError::invalid(format!("order must be asc or desc, not {o:?}"))),
    };
    let limit = q.limit(default_limit, max_limit)?;
    let cursor = match q.get("page") {
        None | Some("") => None,
        Some(p) => Some(decode(p, order)?),
    };
    Ok(PageRequest { limit, order, cursor })
}

/// `{"data": [...], "next_page": …}` (plus `prev_page` when `with_prev`).
pub fn body<T>(page: &Page<T>, order: Order, data: Vec<Value>, with_prev: bool) -> Value {
    let mut out = json!({
        "data": data,
        "next_page": page.next.as_ref().map(|c| encode(order, c)),
    });
    if with_prev {
        out["prev_page"] = json!(page.prev.as_ref().map(|c| encode(order, c)));
    }
    out
}

/// A list endpoint's body: `page`'s items through `out`, and the cursor to the next page.
pub fn list<T>(page: &Page<T>, order: Order, out: impl Fn(&T) -> Value) -> Value {
    body(page, order, page.items.iter().map(out).collect(), false)
}

/// The body of a list that is empty by definition (a filter nothing here can match).
pub fn empty() -> Value {
    json!({"data": [], "next_page": null})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_remember_their_order() {
        let c = PageCursor { key: Keyset { at: 42, id: "sesn_x".into() }, backward: true };
        let s = encode(Order::Desc, &c);
        assert!(s.starts_with("page_"));
        assert_eq!(decode(&s, Order::Desc).unwrap(), c);
        assert!(decode(&s, Order::Asc).is_err());
        assert!(decode("page_!!", Order::Asc).is_err());
        assert!(decode("nope", Order::Asc).is_err());
    }

    #[test]
    fn an_empty_list_is_an_empty_page() {
        let none: Page<()> = Page { items: vec![], next: None, prev: None };
        assert_eq!(empty(), body(&none, Order::Asc, vec![], false));
    }
}
