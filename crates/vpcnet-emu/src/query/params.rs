//! EC2 Query request parameters: the form body `Action=X&Version=...&Name.1=...`, with list and
//! structure members flattened as `Prefix.N` and `Prefix.N.Member`.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::str::FromStr;

use ipnet::Ipv4Net;

use crate::error::Ec2Error;

#[derive(Debug, Clone, Default)]
pub struct Params {
    map: BTreeMap<String, String>,
}

/// One `Filter.N` of a Describe call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    pub name: String,
    pub values: Vec<String>,
}

impl Params {
    /// Parse an `application/x-www-form-urlencoded` body (invalid UTF-8 is replaced; a repeated
    /// key keeps its last value).
    pub fn parse(body: &[u8]) -> Self {
        Self {
            map: form_urlencoded::parse(body).into_owned().collect(),
        }
    }

    /// Merge another set (e.g. the URL query string) without overriding existing keys.
    pub fn merge_missing(&mut self, other: Params) {
        for (k, v) in other.map {
            self.map.entry(k).or_insert(v);
        }
    }

    /// Every parameter name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(String::as_str)
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.map.get(name).map(String::as_str)
    }

    /// A required string; empty counts as missing. Error: `MissingParameter` naming it.
    pub fn required(&self, name: &str) -> Result<&str, Ec2Error> {
        match self.get(name) {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(Ec2Error::missing(name)),
        }
    }

    /// An optional parsed value. Error: `InvalidParameterValue` naming the parameter.
    pub fn parsed<T: FromStr>(&self, name: &str, what: &str) -> Result<Option<T>, Ec2Error> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| Ec2Error::invalid(name, v, &format!("Expected {what}."))),
        }
    }

    pub fn u32(&self, name: &str) -> Result<Option<u32>, Ec2Error> {
        self.parsed(name, "a non-negative integer")
    }

    pub fn bool(&self, name: &str) -> Result<Option<bool>, Ec2Error> {
        match self.get(name) {
            None => Ok(None),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(Some(true)),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(Some(false)),
            Some(v) => Err(Ec2Error::invalid(name, v, "Expected true or false.")),
        }
    }

    /// Members `prefix.N` ordered by N (N ≥ 1).
    pub fn list(&self, prefix: &str) -> Vec<(String, &str)> {
        let mut out: Vec<(u32, String, &str)> = self
            .map
            .iter()
            .filter_map(|(k, v)| {
                let rest = k.strip_prefix(prefix)?.strip_prefix('.')?;
                let n: u32 = rest.parse().ok()?;
                Some((n, k.clone(), v.as_str()))
            })
            .collect();
        out.sort_by_key(|(n, _, _)| *n);
        out.into_iter().map(|(_, k, v)| (k, v)).collect()
    }

    /// String members of list `prefix`, non-empty.
    pub fn strings(&self, prefix: &str) -> Result<Vec<String>, Ec2Error> {
        self.list(prefix)
            .into_iter()
            .map(|(k, v)| {
                if v.is_empty() {
                    Err(Ec2Error::missing(&k))
                } else {
                    Ok(v.to_string())
                }
            })
            .collect()
    }

    /// IPv4 addresses in list `prefix`. Error: `InvalidParameterValue` naming the member.
    pub fn ipv4s(&self, prefix: &str) -> Result<Vec<Ipv4Addr>, Ec2Error> {
        self.list(prefix)
            .into_iter()
            .map(|(k, v)| {
                v.parse()
                    .map_err(|_| Ec2Error::invalid(&k, v, "Expected an IPv4 address."))
            })
            .collect()
    }

    /// Structure members `prefix.N.*` ordered by N, each as its own `Params` with the
    /// `prefix.N.` part removed.
    pub fn structs(&self, prefix: &str) -> Vec<(String, Params)> {
        let mut groups: BTreeMap<u32, Params> = BTreeMap::new();
        for (k, v) in &self.map {
            let Some(rest) = k.strip_prefix(prefix).and_then(|r| r.strip_prefix('.')) else {
                continue;
            };
            let Some((n, member)) = rest.split_once('.') else {
                continue;
            };
            let Ok(n) = n.parse::<u32>() else { continue };
            groups
                .entry(n)
                .or_default()
                .map
                .insert(member.to_string(), v.clone());
        }
        groups
            .into_iter()
            .map(|(n, p)| (format!("{prefix}.{n}"), p))
            .collect()
    }

    /// Members of list `name` parsed by `parse(key, value)`: plain (`Name.N`) or, with
    /// `member`, one member of each structure (`Name.N.Member`, required).
    pub fn parsed_list<T>(
        &self,
        name: &str,
        member: Option<&str>,
        parse: impl Fn(&str, &str) -> Result<T, Ec2Error>,
    ) -> Result<Vec<T>, Ec2Error> {
        match member {
            None => self
                .list(name)
                .into_iter()
                .map(|(k, v)| parse(&k, v))
                .collect(),
            Some(m) => self
                .structs(name)
                .into_iter()
                .map(|(k, s)| {
                    let key = format!("{k}.{m}");
                    parse(&key, s.get(m).ok_or_else(|| Ec2Error::missing(&key))?)
                })
                .collect(),
        }
    }

    /// `Filter.N.Name` / `Filter.N.Value.M`. Error: `MissingParameter` for a filter without name.
    pub fn filters(&self) -> Result<Vec<Filter>, Ec2Error> {
        self.structs("Filter")
            .into_iter()
            .map(|(k, p)| {
                let name = p
                    .required("Name")
                    .map_err(|_| Ec2Error::missing(&format!("{k}.Name")))?
                    .to_string();
                let values = p
                    .list("Value")
                    .into_iter()
                    .map(|(_, v)| v.to_string())
                    .collect();
                Ok(Filter { name, values })
            })
            .collect()
    }

    /// Tags of `TagSpecification.N` (resource type `want`, or any when the type is absent).
    pub fn tag_specs(&self, want: &str) -> Result<Vec<(String, String)>, Ec2Error> {
        let mut tags = Vec::new();
        for (k, spec) in self.structs("TagSpecification") {
            if let Some(rt) = spec.get("ResourceType") {
                if rt != want {
                    return Err(Ec2Error::invalid(
                        &format!("{k}.ResourceType"),
                        rt,
                        &format!("Expected '{want}'."),
                    ));
                }
            }
            tags.extend(spec.tags(&format!("{k}.Tag"))?);
        }
        Ok(tags)
    }

    /// `Tag.N.Key` (required) and `Tag.N.Value` (empty when absent).
    pub fn tags(&self, name: &str) -> Result<Vec<(String, String)>, Ec2Error> {
        let local = name.rsplit('.').next().unwrap_or(name);
        self.structs(local)
            .into_iter()
            .map(|(k, t)| {
                let key = t
                    .required("Key")
                    .map_err(|_| Ec2Error::missing(&format!("{name}{}.Key", &k[local.len()..])))?;
                Ok((key.to_string(), t.get("Value").unwrap_or("").to_string()))
            })
            .collect()
    }
}

/// Parse an IPv4 /28 prefix named by parameter `name`.
pub fn parse_prefix(name: &str, v: &str) -> Result<Ipv4Net, Ec2Error> {
    v.parse::<Ipv4Net>()
        .map_err(|_| Ec2Error::invalid(name, v, "Expected an IPv4 prefix such as 10.0.0.16/28."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_lists() {
        let p = Params::parse(
            b"Action=X&Filter.2.Name=b&Filter.1.Name=a&Filter.1.Value.2=y&Filter.1.Value.1=x&Filter.10.Name=c&TagSpecification.1.ResourceType=network-interface&TagSpecification.1.Tag.1.Key=k&TagSpecification.1.Tag.1.Value=v",
        );
        let f = p.filters().unwrap();
        assert_eq!(
            f.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(f[0].values, ["x", "y"]);
        assert_eq!(
            p.tag_specs("network-interface").unwrap(),
            [("k".to_string(), "v".to_string())]
        );
        assert!(p.tag_specs("instance").is_err());
    }

    #[test]
    fn errors_name_the_parameter() {
        let p = Params::parse(b"Count=abc&Tag.1.Value=v");
        assert!(p.u32("Count").unwrap_err().message.contains("Count"));
        assert!(p.tags("Tag").unwrap_err().message.contains("Tag.1.Key"));
    }
}
