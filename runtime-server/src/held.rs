//! What the server holds per Run UID — function registrations, sessions —
//! with one change (register, replace, remove) at a time.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// Entries keyed by Run UID.
#[derive(Debug)]
pub struct Held<T> {
    entries: RwLock<HashMap<String, Arc<T>>>,
    changes: tokio::sync::Mutex<()>,
}

impl<T> Default for Held<T> {
    fn default() -> Self {
        Self {
            entries: RwLock::default(),
            changes: tokio::sync::Mutex::new(()),
        }
    }
}

impl<T> Held<T> {
    /// Serializes changes: hold the guard from the decision to its end.
    pub async fn change(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.changes.lock().await
    }

    /// The entry of a Run.
    pub fn get(&self, run_uid: &str) -> Option<Arc<T>> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(run_uid)
            .cloned()
    }

    /// Makes `entry` the Run's.
    pub fn insert(&self, run_uid: String, entry: Arc<T>) {
        self.entries
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run_uid, entry);
    }

    /// Removes the Run's entry.
    pub fn take(&self, run_uid: &str) -> Option<Arc<T>> {
        self.entries
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(run_uid)
    }

    /// Removes every entry.
    pub fn drain(&self) -> Vec<Arc<T>> {
        self.entries
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, e)| e)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_held_by_run_uid_until_taken_or_drained() {
        let held = Held::default();
        held.insert("a".into(), Arc::new(1));
        held.insert("b".into(), Arc::new(2));
        held.insert("a".into(), Arc::new(3));
        assert_eq!(held.get("a").as_deref(), Some(&3));
        assert_eq!(held.take("a").as_deref(), Some(&3));
        assert!(held.get("a").is_none());
        assert_eq!(held.drain().len(), 1);
        assert!(held.get("b").is_none());
    }
}
