//! The string formats a schema's `format` names that the API server checks for custom
//! resources (kube-openapi's registry), and that built-in types use: what is wrong with a value,
//! if anything. A format not listed here (`password`, `int32`, `isbn`, …) is not checked.

use base64::Engine;
use std::net::{Ipv4Addr, Ipv6Addr};

/// What is wrong with `text` as a `format`, or `None` when it is fine or the format is not
/// checked.
pub(crate) fn problem(format: &str, text: &str) -> Option<String> {
    let fine = match format {
        // Go's decoder skips line breaks: wrapped base64 is fine.
        "byte" => base64::engine::general_purpose::STANDARD
            .decode(text.replace(['\r', '\n'], ""))
            .is_ok(),
        "date-time" | "datetime" => text.parse::<jiff::Timestamp>().is_ok(),
        "date" => text.len() == 10 && text.parse::<jiff::civil::Date>().is_ok(),
        "duration" => is_duration(text),
        "ipv4" => text.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => text.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(text),
        "mac" => is_mac(text),
        "uuid" | "uuid3" | "uuid4" | "uuid5" => is_uuid(text),
        "hostname" => is_hostname(text),
        "email" => is_email(text),
        "uri" => is_uri(text),
        "hexcolor" => {
            let digits = text.strip_prefix('#').unwrap_or(text);
            matches!(digits.len(), 3 | 6) && digits.chars().all(|c| c.is_ascii_hexdigit())
        }
        "bsonobjectid" => text.len() == 24 && text.chars().all(|c| c.is_ascii_hexdigit()),
        _ => return None,
    };
    (!fine).then(|| expected(format).to_string())
}

fn expected(format: &str) -> &'static str {
    match format {
        "byte" => "expected base64 (standard alphabet, padded)",
        "date-time" | "datetime" => "expected an RFC 3339 time, e.g. 2026-01-02T15:04:05Z",
        "date" => "expected a date, e.g. 2026-01-02",
        "duration" => "expected a duration, e.g. 1h30m or 45s",
        "ipv4" => "expected an IPv4 address",
        "ipv6" => "expected an IPv6 address",
        "cidr" => "expected an address with a prefix length, e.g. 10.0.0.0/8",
        "mac" => "expected a MAC address, e.g. 01:23:45:67:89:ab",
        "uuid" | "uuid3" | "uuid4" | "uuid5" => "expected a UUID",
        "hostname" => "expected a DNS name",
        "email" => "expected an email address",
        "uri" => "expected an absolute URI or path",
        "hexcolor" => "expected a colour as #rrggbb or #rgb",
        _ => "expected a 24-digit hexadecimal object id",
    }
}

const DURATION_UNITS: &[&str] = &[
    "ns",
    "us",
    "µs",
    "ms",
    "s",
    "m",
    "h",
    "d",
    "w",
    "nanosecond",
    "nanoseconds",
    "microsecond",
    "microseconds",
    "millisecond",
    "milliseconds",
    "sec",
    "secs",
    "second",
    "seconds",
    "min",
    "mins",
    "minute",
    "minutes",
    "hr",
    "hrs",
    "hour",
    "hours",
    "day",
    "days",
    "wk",
    "wks",
    "week",
    "weeks",
];

/// Go's durations (`1h30m`, `-2.5s`, `300ms`) and kube-openapi's further units (`d`, `w`, and
/// words: `90 minutes`, `2 days`).
fn is_duration(text: &str) -> bool {
    let text = text.strip_prefix(['-', '+']).unwrap_or(text);
    if text == "0" {
        return true;
    }
    let mut rest = text.trim();
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..digits];
        if number.is_empty() || number.parse::<f64>().is_err() {
            return false;
        }
        rest = rest[digits..].trim_start();
        // kube-openapi's units: Go's, days and weeks, and their words (`5min`, `2 days`).
        let unit_length = rest
            .find(|c: char| !c.is_alphabetic())
            .unwrap_or(rest.len());
        if !DURATION_UNITS.contains(&&rest[..unit_length]) {
            return false;
        }
        rest = rest[unit_length..].trim_start();
    }
    true
}

fn is_cidr(text: &str) -> bool {
    let Some((address, prefix)) = text.split_once('/') else {
        return false;
    };
    let Ok(prefix) = prefix.parse::<u8>() else {
        return false;
    };
    match (address.parse::<Ipv4Addr>(), address.parse::<Ipv6Addr>()) {
        (Ok(_), _) => prefix <= 32,
        (_, Ok(_)) => prefix <= 128,
        _ => false,
    }
}

fn is_mac(text: &str) -> bool {
    let groups: Vec<&str> = text.split([':', '-']).collect();
    matches!(groups.len(), 6 | 8 | 20)
        && groups
            .iter()
            .all(|g| g.len() == 2 && g.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    let lengths: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    (lengths == [8, 4, 4, 4, 12] || lengths == [32])
        && groups
            .iter()
            .all(|g| g.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_hostname(text: &str) -> bool {
    let text = text.strip_suffix('.').unwrap_or(text);
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

fn is_email(text: &str) -> bool {
    match text.rsplit_once('@') {
        Some((local, domain)) => !local.is_empty() && !local.contains(' ') && is_hostname(domain),
        None => false,
    }
}

/// Go's `url.ParseRequestURI`: an absolute URI, or an absolute path.
fn is_uri(text: &str) -> bool {
    if text.starts_with('/') {
        return !text.contains(char::is_whitespace);
    }
    let Some((scheme, rest)) = text.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !rest.is_empty()
        && !text.contains(char::is_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_checked_format_takes_a_good_value_and_refuses_a_bad_one() {
        let cases = [
            ("byte", "aGVsbG8=", "hello!"),
            ("date-time", "2026-01-02T15:04:05Z", "yesterday"),
            ("date", "2026-01-02", "2026-13-40"),
            ("duration", "1h30m", "90 fortnights"),
            ("duration", "90 minutes", "minutes"),
            ("duration", "2d 3h", "h"),
            ("ipv4", "10.1.2.3", "10.1.2"),
            ("ipv6", "fe80::1", "fe80::g"),
            ("cidr", "10.0.0.0/8", "10.0.0.0/33"),
            ("mac", "01:23:45:67:89:ab", "01:23:45"),
            ("uuid", "123e4567-e89b-12d3-a456-426614174000", "123e4567"),
            ("hostname", "web.example.com", "-web.example.com"),
            ("email", "ops@example.com", "ops"),
            ("uri", "https://example.com/x", "example.com"),
            ("uri", "/healthz", "healthz"),
            ("hexcolor", "#a0b1c2", "#a0b1c"),
            ("hexcolor", "fff", "ggg"),
            ("byte", "aGVs\nbG8=", "aGVsbG8"),
        ];
        for (format, good, bad) in cases {
            assert_eq!(problem(format, good), None, "{format}: {good}");
            assert!(problem(format, bad).is_some(), "{format}: {bad}");
        }
        assert_eq!(problem("password", "anything"), None, "not checked");
        assert_eq!(problem("int32", "x"), None, "not a string format");
    }
}
