//! Where the operator's webhook calls may go (`metascript run --webhook-allow`). A hook's URL is
//! its controller author's choice, but the network position it is called from is the
//! operator's: without a policy a hook could reach the cloud's metadata service, the API server
//! or any in-cluster Service, and read what they answer. The policy is pure: it judges one
//! (host, address) pair. The webhook client resolves a hook's host and connects only to the
//! addresses the policy allows, so what is checked is what is connected to (`webhook.rs`).

use ipnet::IpNet;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// One `--webhook-allow` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowEntry {
    /// An address or a CIDR range: the addresses in it.
    Net(IpNet),
    /// A host name, exactly (lowercase, without a trailing dot): every address it resolves to,
    /// except the guarded ones.
    Host(String),
    /// `*.suffix`: every name ending in `.suffix` (not `suffix` itself), as [`AllowEntry::Host`].
    Suffix(String),
}

/// A `--webhook-allow` entry that cannot be read, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{entry:?}: {problem}")]
pub struct EntryError {
    pub entry: String,
    pub problem: EntryProblem,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntryProblem {
    #[error("an entry is empty")]
    Empty,
    #[error("not a CIDR range (an address, '/' and a prefix length, e.g. 10.96.0.0/12)")]
    BadRange,
    #[error("give a host name, an address or a CIDR range, without a scheme, port, path or user")]
    NotAHost,
    #[error("a lone * would allow every name; list address ranges instead (0.0.0.0/0, ::/0)")]
    Everything,
    #[error("* stands only for the leading labels of a name, as in *.svc.cluster.local")]
    Wildcard,
    #[error("not a host name (labels of letters, digits, '-' and '_', 1 to 63 characters each)")]
    BadName,
}

impl FromStr for AllowEntry {
    type Err = EntryError;

    fn from_str(text: &str) -> Result<AllowEntry, EntryError> {
        let entry = text.trim();
        let error = |problem| EntryError {
            entry: entry.to_string(),
            problem,
        };
        if entry.is_empty() {
            return Err(error(EntryProblem::Empty));
        }
        if let Ok(address) = entry.parse::<IpAddr>() {
            return Ok(AllowEntry::Net(address.to_canonical().into()));
        }
        if entry.contains("://") || entry.contains(['@', '?', '#']) {
            return Err(error(EntryProblem::NotAHost));
        }
        if entry.contains('/') {
            return match entry.parse::<IpNet>() {
                Ok(net) => Ok(AllowEntry::Net(net.trunc())),
                Err(_) => Err(error(EntryProblem::BadRange)),
            };
        }
        // A port, once addresses and ranges are read.
        if entry.contains(':') {
            return Err(error(EntryProblem::NotAHost));
        }
        if entry == "*" {
            return Err(error(EntryProblem::Everything));
        }
        let (wildcard, name) = match entry.strip_prefix("*.") {
            Some(suffix) => (true, suffix),
            None => (false, entry),
        };
        if name.contains('*') {
            return Err(error(EntryProblem::Wildcard));
        }
        let name = normalize(name);
        let label_ok = |label: &str| {
            (1..=63).contains(&label.len())
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        if name.len() > 253 || !name.split('.').all(label_ok) {
            return Err(error(EntryProblem::BadName));
        }
        Ok(match wildcard {
            true => AllowEntry::Suffix(name),
            false => AllowEntry::Host(name),
        })
    }
}

impl fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllowEntry::Net(net) if net.prefix_len() == net.max_prefix_len() => net.addr().fmt(f),
            AllowEntry::Net(net) => net.fmt(f),
            AllowEntry::Host(name) => name.fmt(f),
            AllowEntry::Suffix(suffix) => write!(f, "*.{suffix}"),
        }
    }
}

/// A host name as entries compare it: lowercase, without the trailing dot of a rooted name.
fn normalize(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// Addresses a broad entry never opens: only an address entry inside their own range does,
/// which an admin writes on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// `127.0.0.0/8`, `::1`: the operator's own pod.
    Loopback,
    /// `169.254.0.0/16`, `fe80::/10`: where clouds serve instance metadata and credentials.
    LinkLocal,
    /// `0.0.0.0/8`, `::`: connecting to it reaches the operator's own host.
    Unspecified,
    /// `224.0.0.0/4`, `255.255.255.255`, `ff00::/8`.
    Multicast,
    /// An address of the API server, which a hook must not be able to call with the
    /// operator's network position.
    ApiServer,
    /// A cloud's instance-metadata address outside link-local: AWS's over IPv6
    /// (`fd00:ec2::254`), Alibaba Cloud's (`100.100.100.200`).
    Metadata,
}

/// Instance-metadata services at addresses that are not link-local.
const METADATA: [IpAddr; 2] = [
    IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
    IpAddr::V4(std::net::Ipv4Addr::new(100, 100, 100, 200)),
];

/// The address a connection ends up at: IPv4 written as IPv6 (`::ffff:a.b.c.d`) and IPv4 behind
/// the well-known NAT64 prefix (`64:ff9b::a.b.c.d`) are judged as that IPv4 address.
fn canonical(address: IpAddr) -> IpAddr {
    match address.to_canonical() {
        IpAddr::V6(v6) if v6.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] => {
            let [.., a, b, c, d] = v6.octets();
            IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d))
        }
        other => other,
    }
}

impl Guard {
    /// The range an address entry must lie inside to open `address` on purpose.
    fn range(self, address: IpAddr) -> IpNet {
        let net = |text: &str| text.parse::<IpNet>().expect("a valid range");
        match (self, address) {
            (Guard::Loopback, IpAddr::V4(_)) => net("127.0.0.0/8"),
            (Guard::LinkLocal, IpAddr::V4(_)) => net("169.254.0.0/16"),
            (Guard::LinkLocal, IpAddr::V6(_)) => net("fe80::/10"),
            (Guard::Unspecified, IpAddr::V4(_)) => net("0.0.0.0/8"),
            (Guard::Multicast, IpAddr::V4(v4)) if !v4.is_broadcast() => net("224.0.0.0/4"),
            (Guard::Multicast, IpAddr::V6(_)) => net("ff00::/8"),
            // ::1, ::, the broadcast address and the API server's: the address alone.
            _ => address.into(),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Guard::Loopback => "loopback",
            Guard::LinkLocal => "link-local (where clouds serve instance metadata)",
            Guard::Unspecified => "unspecified",
            Guard::Multicast => "multicast or broadcast",
            Guard::ApiServer => "the API server's",
            Guard::Metadata => "a cloud's instance metadata",
        }
    }
}

/// Why a webhook call may not connect to an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denial {
    /// `--webhook-allow` lists nothing: no webhook may be called.
    NothingAllowed,
    /// No entry covers the address, nor the host name it was resolved from.
    NotListed,
    /// A guarded address no address entry inside its range lists.
    Guarded(Guard),
}

/// Where webhook calls may go: the `--webhook-allow` entries, and the API server's addresses,
/// guarded like loopback.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct EgressPolicy {
    entries: Vec<AllowEntry>,
    api_server: Vec<IpAddr>,
}

impl EgressPolicy {
    pub(crate) fn new(
        entries: Vec<AllowEntry>,
        api_server: impl IntoIterator<Item = IpAddr>,
    ) -> EgressPolicy {
        let mut api_server: Vec<IpAddr> = api_server.into_iter().map(canonical).collect();
        api_server.sort();
        api_server.dedup();
        EgressPolicy {
            entries,
            api_server,
        }
    }

    pub(crate) fn entries(&self) -> &[AllowEntry] {
        &self.entries
    }

    /// Whether a call to a URL whose host is `name` (`None` for an address) may connect to
    /// `address`. A guarded address is open only to an address entry that contains it and lies
    /// inside its guarded range (`127.0.0.0/8` for loopback; the address itself for the API
    /// server); a host name entry never opens it, nor does a broader range such as
    /// `0.0.0.0/0`. Any other address is open to an entry containing it, or to an entry naming
    /// the host.
    pub(crate) fn check(&self, name: Option<&str>, address: IpAddr) -> Result<(), Denial> {
        if self.entries.is_empty() {
            return Err(Denial::NothingAllowed);
        }
        let address = canonical(address);
        let nets = || {
            self.entries.iter().filter_map(|entry| match entry {
                AllowEntry::Net(net) if net.contains(&address) => Some(net),
                _ => None,
            })
        };
        let guards = self.guards(address);
        if let Some(first) = guards.first() {
            let on_purpose = nets().any(|net| {
                guards
                    .iter()
                    .any(|guard| guard.range(address).contains(net))
            });
            return match on_purpose {
                true => Ok(()),
                false => Err(Denial::Guarded(*first)),
            };
        }
        let name = name.map(normalize);
        let named = |entry: &AllowEntry| match (entry, &name) {
            (AllowEntry::Host(host), Some(name)) => host == name,
            (AllowEntry::Suffix(suffix), Some(name)) => name
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            _ => false,
        };
        match nets().next().is_some() || self.entries.iter().any(named) {
            true => Ok(()),
            false => Err(Denial::NotListed),
        }
    }

    /// The guards of an address, the one a refusal names first: what the address is (loopback,
    /// link-local) before whose it is (an API server listening there).
    fn guards(&self, address: IpAddr) -> Vec<Guard> {
        let mut guards = Vec::new();
        let (loopback, link_local, unspecified, multicast) = match address {
            IpAddr::V4(v4) => (
                v4.is_loopback(),
                v4.is_link_local(),
                v4.octets()[0] == 0,
                v4.is_multicast() || v4.is_broadcast(),
            ),
            IpAddr::V6(v6) => (
                v6.is_loopback(),
                v6.is_unicast_link_local(),
                v6.is_unspecified(),
                v6.is_multicast(),
            ),
        };
        for (is, guard) in [
            (loopback, Guard::Loopback),
            (link_local, Guard::LinkLocal),
            (unspecified, Guard::Unspecified),
            (multicast, Guard::Multicast),
        ] {
            if is {
                guards.push(guard);
            }
        }
        if METADATA.contains(&address) {
            guards.push(Guard::Metadata);
        }
        if self.api_server.contains(&address) {
            guards.push(Guard::ApiServer);
        }
        guards
    }
}

/// A webhook call refused before it connected: no address of its host is allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct Refused {
    /// The URL's host, as written.
    pub host: String,
    /// Every address it resolved to, and why each is closed.
    pub addresses: Vec<(IpAddr, Denial)>,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("destination not allowed: ")?;
        if self.addresses.is_empty()
            || self
                .addresses
                .iter()
                .any(|(_, denial)| *denial == Denial::NothingAllowed)
        {
            return write!(
                f,
                "{} (the operator calls no webhook until an admin lists where they may go: \
                 metascript run --webhook-allow)",
                self.host
            );
        }
        let literal = self.host.trim_matches(['[', ']']).parse::<IpAddr>().is_ok();
        if !literal {
            write!(f, "{} resolves to ", self.host)?;
        }
        for (index, (address, denial)) in self.addresses.iter().enumerate() {
            if index > 0 {
                f.write_str("; ")?;
            }
            match denial {
                Denial::NothingAllowed | Denial::NotListed => {
                    write!(f, "{address}, not in --webhook-allow")?
                }
                Denial::Guarded(guard) => write!(
                    f,
                    "{address}, {} address: only an address entry listing it explicitly allows \
                     it (--webhook-allow {address})",
                    guard.describe(),
                )?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(list: &[&str]) -> Vec<AllowEntry> {
        list.iter().map(|entry| entry.parse().unwrap()).collect()
    }

    fn policy(list: &[&str]) -> EgressPolicy {
        EgressPolicy::new(entries(list), [ip("10.96.0.1"), ip("172.18.0.2")])
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn entries_are_addresses_ranges_names_and_suffixes() {
        let parsed = entries(&[
            "10.96.0.0/12",
            " 10.0.0.7 ",
            "fd00::/8",
            "::1",
            "hooks.example.com",
            "Hooks.Example.COM.",
            "*.svc.cluster.local",
            "10.1.2.3/8",
            "::ffff:127.0.0.1",
        ]);
        let shown: Vec<String> = parsed.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "10.96.0.0/12",
                "10.0.0.7",
                "fd00::/8",
                "::1",
                "hooks.example.com",
                "hooks.example.com",
                "*.svc.cluster.local",
                // The host bits of a range are dropped; a mapped address is the IPv4 one.
                "10.0.0.0/8",
                "127.0.0.1",
            ]
        );
        assert_eq!(parsed[6], AllowEntry::Suffix("svc.cluster.local".into()));
    }

    #[test]
    fn a_bad_entry_is_refused_naming_it_and_why() {
        for (entry, problem) in [
            ("", EntryProblem::Empty),
            ("10.0.0.0/33", EntryProblem::BadRange),
            ("10.0.0/8", EntryProblem::BadRange),
            ("http://hooks.example.com", EntryProblem::NotAHost),
            ("hooks.example.com:8443", EntryProblem::NotAHost),
            ("user@hooks", EntryProblem::NotAHost),
            ("hooks/sync", EntryProblem::BadRange),
            ("*", EntryProblem::Everything),
            ("hooks.*.example.com", EntryProblem::Wildcard),
            ("*hooks.example.com", EntryProblem::Wildcard),
            ("**.example.com", EntryProblem::Wildcard),
            ("hooks..example.com", EntryProblem::BadName),
            ("-hooks.example.com", EntryProblem::BadName),
            ("hooks example", EntryProblem::BadName),
        ] {
            let error = entry.parse::<AllowEntry>().unwrap_err();
            assert_eq!(error.problem, problem, "{entry:?}: {error}");
            assert!(
                error.to_string().starts_with(&format!("{entry:?}: ")),
                "{error}"
            );
        }
        assert_eq!(
            "hooks/sync".parse::<AllowEntry>().unwrap_err().to_string(),
            "\"hooks/sync\": not a CIDR range (an address, '/' and a prefix length, e.g. \
             10.96.0.0/12)"
        );
    }

    #[test]
    fn nothing_is_allowed_without_an_entry() {
        let open = EgressPolicy::new(Vec::new(), []);
        for address in ["93.184.216.34", "10.0.0.7", "127.0.0.1"] {
            assert_eq!(
                open.check(Some("hooks.example.com"), ip(address)),
                Err(Denial::NothingAllowed)
            );
        }
    }

    #[test]
    fn ranges_and_addresses_allow_what_they_contain() {
        let policy = policy(&["10.96.0.0/12", "192.0.2.7", "2001:db8::/32"]);
        assert_eq!(policy.check(None, ip("10.100.3.4")), Ok(()));
        assert_eq!(policy.check(Some("hooks.team-a"), ip("10.100.3.4")), Ok(()));
        assert_eq!(policy.check(None, ip("192.0.2.7")), Ok(()));
        assert_eq!(policy.check(None, ip("2001:db8::5")), Ok(()));
        assert_eq!(policy.check(None, ip("::ffff:10.100.3.4")), Ok(()));
        assert_eq!(policy.check(None, ip("192.0.2.8")), Err(Denial::NotListed));
        assert_eq!(policy.check(None, ip("10.112.0.1")), Err(Denial::NotListed));
    }

    #[test]
    fn names_allow_their_host_and_suffixes_the_names_below_them() {
        let policy = policy(&["hooks.example.com", "*.svc.cluster.local"]);
        let public = ip("93.184.216.34");
        assert_eq!(policy.check(Some("hooks.example.com"), public), Ok(()));
        assert_eq!(policy.check(Some("HOOKS.example.com."), public), Ok(()));
        assert_eq!(
            policy.check(Some("a.hooks.example.com"), public),
            Err(Denial::NotListed)
        );
        assert_eq!(
            policy.check(Some("web.shop.svc.cluster.local"), public),
            Ok(())
        );
        assert_eq!(
            policy.check(Some("svc.cluster.local"), public),
            Err(Denial::NotListed)
        );
        assert_eq!(
            policy.check(Some("evilsvc.cluster.local"), public),
            Err(Denial::NotListed)
        );
        // An address URL is no name: name entries never allow it.
        assert_eq!(policy.check(None, public), Err(Denial::NotListed));
    }

    #[test]
    fn guarded_addresses_need_an_address_entry_inside_their_range() {
        let everything = policy(&["0.0.0.0/0", "::/0", "localhost", "*.internal"]);
        for (address, guard) in [
            ("127.0.0.1", Guard::Loopback),
            ("127.9.9.9", Guard::Loopback),
            ("::1", Guard::Loopback),
            ("::ffff:127.0.0.1", Guard::Loopback),
            ("169.254.169.254", Guard::LinkLocal),
            ("fe80::1", Guard::LinkLocal),
            ("0.0.0.0", Guard::Unspecified),
            ("::", Guard::Unspecified),
            ("224.0.0.1", Guard::Multicast),
            ("255.255.255.255", Guard::Multicast),
            ("10.96.0.1", Guard::ApiServer),
            ("172.18.0.2", Guard::ApiServer),
            ("fd00:ec2::254", Guard::Metadata),
            ("100.100.100.200", Guard::Metadata),
            // IPv4 behind the NAT64 prefix is where the connection ends up.
            ("64:ff9b::7f00:1", Guard::Loopback),
            ("64:ff9b::a9fe:a9fe", Guard::LinkLocal),
        ] {
            // Neither a name resolving to it nor a range around it opens it.
            assert_eq!(
                everything.check(Some("localhost"), ip(address)),
                Err(Denial::Guarded(guard)),
                "{address}"
            );
            assert_eq!(
                everything.check(Some("metadata.internal"), ip(address)),
                Err(Denial::Guarded(guard)),
                "{address}"
            );
            assert_eq!(
                everything.check(None, ip(address)),
                Err(Denial::Guarded(guard)),
                "{address}"
            );
        }
        // The Service range holding the API server's ClusterIP opens the rest of it only.
        let services = policy(&["10.96.0.0/12"]);
        assert_eq!(services.check(None, ip("10.96.0.10")), Ok(()));
        assert_eq!(
            services.check(None, ip("10.96.0.1")),
            Err(Denial::Guarded(Guard::ApiServer))
        );
        // Listed on purpose.
        let explicit = policy(&["127.0.0.0/8", "169.254.169.254", "10.96.0.1", "::1"]);
        for address in [
            "127.0.0.1",
            "127.0.0.2",
            "169.254.169.254",
            "10.96.0.1",
            "::1",
        ] {
            assert_eq!(explicit.check(None, ip(address)), Ok(()), "{address}");
        }
        assert_eq!(
            explicit.check(None, ip("169.254.0.1")),
            Err(Denial::Guarded(Guard::LinkLocal))
        );
        // An API server on loopback (a workstation's cluster) is open to a loopback entry.
        let local = EgressPolicy::new(entries(&["127.0.0.0/8"]), [ip("127.0.0.1")]);
        assert_eq!(local.check(None, ip("127.0.0.1")), Ok(()));
        let wide = EgressPolicy::new(entries(&["0.0.0.0/0"]), [ip("127.0.0.1")]);
        assert_eq!(
            wide.check(None, ip("127.0.0.1")),
            Err(Denial::Guarded(Guard::Loopback))
        );
        let api_range = EgressPolicy::new(entries(&["172.18.0.0/16"]), [ip("172.18.0.2")]);
        assert_eq!(
            api_range.check(Some("kubernetes"), ip("172.18.0.2")),
            Err(Denial::Guarded(Guard::ApiServer))
        );
    }

    #[test]
    fn a_refusal_names_the_host_each_address_and_why() {
        let refused = |host: &str, addresses: &[(&str, Denial)]| {
            Refused {
                host: host.into(),
                addresses: addresses.iter().map(|(a, d)| (ip(a), *d)).collect(),
            }
            .to_string()
        };
        assert_eq!(
            refused(
                "127.0.0.1",
                &[("127.0.0.1", Denial::Guarded(Guard::Loopback))]
            ),
            "destination not allowed: 127.0.0.1, loopback address: only an address entry \
             listing it explicitly allows it (--webhook-allow 127.0.0.1)"
        );
        assert_eq!(
            refused(
                "hooks.example.com",
                &[
                    ("10.0.0.7", Denial::NotListed),
                    ("10.96.0.1", Denial::Guarded(Guard::ApiServer))
                ]
            ),
            "destination not allowed: hooks.example.com resolves to 10.0.0.7, not in \
             --webhook-allow; 10.96.0.1, the API server's address: only an address entry \
             listing it explicitly allows it (--webhook-allow 10.96.0.1)"
        );
        assert_eq!(
            refused("hooks.example.com", &[("10.0.0.7", Denial::NothingAllowed)]),
            "destination not allowed: hooks.example.com (the operator calls no webhook until \
             an admin lists where they may go: metascript run --webhook-allow)"
        );
    }
}
