//! Resource amounts as the scheduler counts them: whole numbers of
//! thousandths of a unit (millicores of `cpu`, thousandths of a byte of
//! `memory`), so `cpu: 250m` and `memory: 1Gi` add exactly. The API turns
//! Kubernetes quantities into these (`kruntimes-api`); the core never parses.

use std::collections::BTreeMap;

/// Named amounts, each in thousandths of its unit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources(BTreeMap<String, u64>);

/// Whether `name` is an extended resource (`vendor.example/gpu`): one the
/// Runtime must declare to be requested at all. Standard names (`cpu`,
/// `memory`, `ephemeral-storage`) a Runtime does not declare are not
/// accounted.
pub fn is_extended(name: &str) -> bool {
    name.contains('/')
}

impl Resources {
    /// No resources.
    pub fn new() -> Self {
        Self::default()
    }

    /// `self` with `name` set to `milli` thousandths.
    pub fn with(mut self, name: &str, milli: u64) -> Self {
        self.0.insert(name.to_owned(), milli);
        self
    }

    /// The amount of `name` (0 when absent).
    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Every named amount.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Whether nothing is named.
    pub fn is_empty(&self) -> bool {
        self.0.values().all(|v| *v == 0)
    }

    /// Adds `other` (saturating).
    pub fn add(&mut self, other: &Resources) {
        for (k, v) in other.iter() {
            let e = self.0.entry(k.to_owned()).or_insert(0);
            *e = e.saturating_add(v);
        }
    }

    /// The first resource of `request` that does not fit into `capacity`
    /// beside `used`, or `None` when all fit. Only resources `capacity`
    /// names are accounted, except extended ones, which never fit where
    /// they are not declared.
    pub fn first_short<'a>(
        request: &'a Resources,
        used: &Resources,
        capacity: &Resources,
    ) -> Option<&'a str> {
        request
            .iter()
            .filter(|(_, want)| *want > 0)
            .find_map(|(name, want)| {
                let fits = match capacity.0.get(name) {
                    Some(cap) => used
                        .get(name)
                        .checked_add(want)
                        .is_some_and(|sum| sum <= *cap),
                    None => !is_extended(name),
                };
                (!fits).then_some(name)
            })
    }
}

impl FromIterator<(String, u64)> for Resources {
    fn from_iter<T: IntoIterator<Item = (String, u64)>>(iter: T) -> Self {
        Self(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_resources_fit_while_the_sum_stays_within_capacity() {
        let cap = Resources::new().with("cpu", 2000).with("memory", 4 << 30);
        let used = Resources::new().with("cpu", 1500);
        let small = Resources::new().with("cpu", 500);
        let big = Resources::new().with("cpu", 501);
        assert_eq!(Resources::first_short(&small, &used, &cap), None);
        assert_eq!(Resources::first_short(&big, &used, &cap), Some("cpu"));
    }

    #[test]
    fn undeclared_standard_names_are_not_accounted_but_extended_ones_never_fit() {
        let cap = Resources::new().with("cpu", 1000);
        let mem = Resources::new().with("memory", u64::MAX);
        assert_eq!(Resources::first_short(&mem, &Resources::new(), &cap), None);
        let gpu = Resources::new().with("example.com/gpu", 1000);
        assert_eq!(
            Resources::first_short(&gpu, &Resources::new(), &cap),
            Some("example.com/gpu")
        );
        let zero_gpu = Resources::new().with("example.com/gpu", 0);
        assert_eq!(
            Resources::first_short(&zero_gpu, &Resources::new(), &cap),
            None
        );
    }

    #[test]
    fn sums_saturate_instead_of_wrapping() {
        let mut used = Resources::new().with("cpu", u64::MAX - 1);
        used.add(&Resources::new().with("cpu", 5).with("memory", 7));
        assert_eq!(used.get("cpu"), u64::MAX);
        assert_eq!(used.get("memory"), 7);
        let cap = Resources::new().with("cpu", u64::MAX);
        let one = Resources::new().with("cpu", 1);
        assert_eq!(Resources::first_short(&one, &used, &cap), Some("cpu"));
    }
}
