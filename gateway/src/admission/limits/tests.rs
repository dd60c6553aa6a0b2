use http::HeaderValue;

use super::*;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

fn limits() -> Limits {
    Limits {
        max_body_bytes: 1024,
        max_session_body_bytes: 4096,
        max_header_bytes: 64,
        max_in_flight: 2,
        route_settle: std::time::Duration::ZERO,
    }
}

#[test]
fn a_valid_invocation_id_is_kept() {
    let h = headers(&[("x-kruntimes-invocation-id", "inv-42")]);
    assert_eq!(invocation_id(&h), Ok("inv-42".to_owned()));
}

#[test]
fn a_missing_invocation_id_is_generated() {
    let a = invocation_id(&HeaderMap::new()).unwrap();
    let b = invocation_id(&HeaderMap::new()).unwrap();
    assert!(api::valid_invocation_id(&a));
    assert_ne!(a, b);
}

#[test]
fn an_invocation_id_over_128_bytes_or_not_visible_ascii_is_400() {
    for bad in ["x".repeat(129), "has space".into(), String::new()] {
        let h = headers(&[("x-kruntimes-invocation-id", &bad)]);
        assert_eq!(invocation_id(&h), Err(LimitError::InvalidInvocationId));
    }
    let mut h = HeaderMap::new();
    h.insert(
        api::HEADER_INVOCATION_ID,
        HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
    );
    assert_eq!(invocation_id(&h), Err(LimitError::InvalidInvocationId));
}

#[test]
fn header_bytes_count_names_values_and_the_path_with_query() {
    let h = headers(&[("ab", "cde"), ("f", "g")]);
    let uri: Uri = "/p?q=1".parse().unwrap();
    assert_eq!(header_bytes(&h, &uri), 2 + 3 + 1 + 1 + 6);
}

#[test]
fn headers_over_the_limit_are_431() {
    let uri: Uri = "/v1".parse().unwrap();
    let max = limits().max_header_bytes;
    let at_limit = headers(&[("x", &"v".repeat(max - 1 - 3))]);
    assert_eq!(check_header_bytes(&at_limit, &uri, max), Ok(()));
    let over = headers(&[("x", &"v".repeat(max - 3))]);
    assert_eq!(
        check_header_bytes(&over, &uri, max),
        Err(LimitError::HeadersTooLarge)
    );
    let long_path: Uri = format!("/{}", "p".repeat(max)).parse().unwrap();
    assert_eq!(
        check_header_bytes(&HeaderMap::new(), &long_path, max),
        Err(LimitError::HeadersTooLarge)
    );
}

#[test]
fn sessions_have_their_own_body_limit() {
    assert_eq!(limits().max_body(false), 1024);
    assert_eq!(limits().max_body(true), 4096);
}

#[test]
fn a_declared_body_over_the_limit_is_413_before_it_is_read() {
    let h = headers(&[("content-length", "1025")]);
    assert_eq!(
        check_content_length(&h, 1024),
        Err(LimitError::BodyTooLarge(1024))
    );
    let h = headers(&[("content-length", "1024")]);
    assert_eq!(check_content_length(&h, 1024), Ok(()));
}

#[test]
fn a_body_without_content_length_is_left_to_the_body_filter() {
    assert_eq!(check_content_length(&HeaderMap::new(), 0), Ok(()));
}

#[test]
fn a_content_length_that_is_not_a_number_is_400() {
    for bad in ["ten", "-1", "1 2", ""] {
        let h = headers(&[("content-length", bad)]);
        assert_eq!(
            check_content_length(&h, 1024),
            Err(LimitError::InvalidContentLength),
            "{bad:?}"
        );
    }
}

#[test]
fn requests_over_the_in_flight_limit_are_503_and_counted_until_they_end() {
    let gauge = prometheus::IntGauge::new("in_flight", "test").unwrap();
    let limit = InFlightLimit::new(2, gauge.clone());
    let a = limit.acquire();
    let b = limit.acquire();
    assert_eq!((a.admitted(), b.admitted()), (Ok(()), Ok(())));
    let c = limit.acquire();
    assert_eq!(c.admitted(), Err(LimitError::Overloaded));
    assert_eq!(gauge.get(), 3);
    drop(c);
    drop(a);
    assert_eq!(gauge.get(), 1);
    let d = limit.acquire();
    assert_eq!(d.admitted(), Ok(()));
    drop((b, d));
    assert_eq!(gauge.get(), 0);
}
