//! Disaggregated prefill/decode (P/D): a group of servers launched and killed as one unit
//! (`srv-launch --pd 2p1d`), each member's `server` record saying which member it is.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The largest count of prefill or decode servers in one layout: far above any box's GPUs,
/// low enough that a typo (`--pd 100p1d`) is refused before anything starts.
pub const MAX_PD_SERVERS: u32 = 64;

/// What a group member does.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum PdRole {
    /// Runs each request's prompt and hands its KV cache on.
    Prefill,
    /// Takes the KV cache and generates the answer.
    Decode,
    /// The front the clients load: sends each request to a prefill server, then a decode one.
    Proxy,
}

impl PdRole {
    pub fn as_str(self) -> &'static str {
        match self {
            PdRole::Prefill => "prefill",
            PdRole::Decode => "decode",
            PdRole::Proxy => "proxy",
        }
    }
}

impl fmt::Display for PdRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A P/D layout, `xPyD`: x prefill servers and y decode servers behind one proxy. Written and
/// read as its text (`"2p1d"`), case-insensitive on the way in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PdLayout {
    pub prefill: u32,
    pub decode: u32,
}

impl PdLayout {
    /// The count of servers of `role` (one proxy).
    pub fn count(self, role: PdRole) -> u32 {
        match role {
            PdRole::Prefill => self.prefill,
            PdRole::Decode => self.decode,
            PdRole::Proxy => 1,
        }
    }

    /// Servers in all (the proxy aside).
    pub fn servers(self) -> u32 {
        self.prefill + self.decode
    }

    /// Each server in start order with its GPUs, as indices into the group's GPU list: runs of
    /// `per_server` (its TP x PP), the prefill servers first. The one placement rule:
    /// `srv-launch --pd` splits `--gpus` by it, `srv-sim --predict --pd` places its members by
    /// it.
    pub fn server_gpus(
        self,
        per_server: u32,
    ) -> impl Iterator<Item = (PdRole, u32, std::ops::Range<u32>)> {
        self.members()
            .filter(|(role, _)| *role != PdRole::Proxy)
            .zip(0..)
            .map(move |((role, index), k)| (role, index, k * per_server..(k + 1) * per_server))
    }

    /// Every member in start order: the prefill servers, the decode servers, then the proxy
    /// (which needs both sides' URLs).
    pub fn members(self) -> impl Iterator<Item = (PdRole, u32)> {
        [PdRole::Prefill, PdRole::Decode, PdRole::Proxy]
            .into_iter()
            .flat_map(move |role| (0..self.count(role)).map(move |i| (role, i)))
    }
}

impl fmt::Display for PdLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}p{}d", self.prefill, self.decode)
    }
}

impl FromStr for PdLayout {
    type Err = String;

    /// `1p1d`, `2P1D`, ...: each count at least 1 and at most [`MAX_PD_SERVERS`].
    fn from_str(s: &str) -> Result<PdLayout, String> {
        let bad = || format!("'{s}' is not a P/D layout: write xPyD, e.g. 1p1d or 2p1d");
        let lower = s.trim().to_ascii_lowercase();
        let (p, d) = lower
            .strip_suffix('d')
            .and_then(|rest| rest.split_once('p'))
            .ok_or_else(bad)?;
        let count = |t: &str| -> Result<u32, String> {
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            let n: u32 = t.parse().map_err(|_| bad())?;
            if n == 0 || n > MAX_PD_SERVERS {
                return Err(format!(
                    "'{s}': each side has 1 to {MAX_PD_SERVERS} servers"
                ));
            }
            Ok(n)
        };
        Ok(PdLayout {
            prefill: count(p)?,
            decode: count(d)?,
        })
    }
}

impl Serialize for PdLayout {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PdLayout {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PdLayout, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Which member of a P/D group a `server` record is (its `pd`): srv-kill takes every record
/// of the group, loadgen loads the proxy and reads every member's `/metrics` by role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PdMember {
    /// The group's id, the same on every member's record (one launch's).
    pub group: String,
    /// The group's layout, so a reader knows how many members to expect.
    pub layout: PdLayout,
    pub role: PdRole,
    /// The member's index among those of its role, from 0 (the proxy's is 0).
    pub index: u32,
}

/// One member of a P/D group over a load point, from its own `/metrics` (loadgen loads the
/// proxy and scrapes every member too): a summary's `pd_members`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PdMemberStats {
    pub role: PdRole,
    pub index: u32,
    /// The member's base URL, as its `server` record names it.
    pub url: String,
    /// Its own view of the point; absent where its `/metrics` did not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<super::ServerStats>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_read_and_write_as_xpyd_and_list_their_members_in_start_order() {
        let l: PdLayout = "2P1d".parse().unwrap();
        assert_eq!((l.prefill, l.decode), (2, 1));
        assert_eq!(l.to_string(), "2p1d");
        let members: Vec<String> = l.members().map(|(r, i)| format!("{r}{i}")).collect();
        assert_eq!(members, ["prefill0", "prefill1", "decode0", "proxy0"]);
        let gpus: Vec<String> = l
            .server_gpus(2)
            .map(|(r, i, g)| format!("{r}{i}:{g:?}"))
            .collect();
        assert_eq!(gpus, ["prefill0:0..2", "prefill1:2..4", "decode0:4..6"]);
        for bad in [
            "", "1p", "p1d", "0p1d", "1p0d", "1d1p", "1p1", "-1p1d", "1p1dd", "65p1d",
        ] {
            assert!(bad.parse::<PdLayout>().is_err(), "{bad}");
        }
        assert!("65p1d".parse::<PdLayout>().unwrap_err().contains("1 to 64"));
    }

    #[test]
    fn a_member_round_trips_with_its_layout_as_text() {
        let m = PdMember {
            group: "g".into(),
            layout: "1p2d".parse().unwrap(),
            role: PdRole::Decode,
            index: 1,
        };
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(
            text,
            r#"{"group":"g","layout":"1p2d","role":"decode","index":1}"#
        );
        assert_eq!(serde_json::from_str::<PdMember>(&text).unwrap(), m);
        let bad = text.replace("1p2d", "1x2");
        assert!(serde_json::from_str::<PdMember>(&bad).is_err());
    }
}
