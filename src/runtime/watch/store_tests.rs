use super::*;
use crate::resources::ResourceType;
use crate::runtime::keys::ObjRef;
use crate::runtime::replicas::shard::Assignment;
use serde_json::json;

fn config_map(namespace: &str, name: &str, version: &str, data: Value) -> Arc<Value> {
    Arc::new(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-{name}"),
                     "resourceVersion": version},
        "data": data,
    }))
}

fn owned(name: &str, owner_uid: &str) -> Arc<Value> {
    Arc::new(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "ns", "name": name, "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "other"},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "p", "uid": owner_uid,
             "controller": true},
        ]},
    }))
}

fn names<O: std::ops::Deref<Target = Value>>(objects: impl IntoIterator<Item = O>) -> Vec<String> {
    let mut names: Vec<String> = objects
        .into_iter()
        .map(|o| object::name(&o).to_owned())
        .collect();
    names.sort();
    names
}

/// Objects as a view lists them, decoded.
fn decoded(kept: Vec<Kept>) -> Vec<Arc<Value>> {
    kept.into_iter().map(Kept::decoded).collect()
}

/// An object as a reader gets it.
fn read(store: &Store, namespace: &str, name: &str) -> Option<Arc<Value>> {
    store.get(namespace, name).map(Kept::decoded)
}

/// A changed state, decoded.
fn state(kept: Option<Kept>) -> Value {
    (*kept.expect("a state").decoded()).clone()
}

/// Objects as a feed lists them.
fn listing(objects: &[&Arc<Value>]) -> Vec<Incoming> {
    objects.iter().map(|o| Incoming::of(o)).collect()
}

/// Each change as (old name, new name), in order.
fn described(changes: &[Change]) -> Vec<(Option<String>, Option<String>)> {
    let name = |o: &Option<Kept>| o.clone().map(|o| object::name(&o.decoded()).to_owned());
    changes
        .iter()
        .map(|change| (name(&change.old), name(&change.new)))
        .collect()
}

fn added(name: &str) -> (Option<String>, Option<String>) {
    (None, Some(name.into()))
}

fn deleted(name: &str) -> (Option<String>, Option<String>) {
    (Some(name.into()), None)
}

/// A store with one feed holding `objects`.
fn fed(objects: &[Arc<Value>]) -> (Store, FeedSlot) {
    let mut store = Store::default();
    let feed = store.open_feed().unwrap();
    for object in objects {
        store.apply(feed, object.clone());
    }
    (store, feed)
}

#[test]
fn apply_reports_adds_and_meaningful_updates_only() {
    let (mut store, feed) = fed(&[]);
    let first = config_map("ns", "a", "1", json!({"k": "v"}));
    let Change { old, new, .. } = store.apply(feed, first.clone()).expect("an add");
    assert!(old.is_none() && state(new) == *first);

    let noise = config_map("ns", "a", "2", json!({"k": "v"}));
    assert!(store.apply(feed, noise.clone()).is_none());
    // The cache still moves to the newest version.
    assert_eq!(read(&store, "ns", "a").unwrap(), noise);

    let edit = config_map("ns", "a", "3", json!({"k": "w"}));
    let Change { old, new, .. } = store.apply(feed, edit.clone()).expect("an update");
    assert!(state(old) == *noise && state(new) == *edit);
    assert_eq!(store.len(), 1);
}

#[test]
fn delete_removes_from_every_index() {
    let (mut store, feed) = fed(&[
        owned("child", "owner-1"),
        config_map("other", "b", "1", json!({})),
    ]);
    assert_eq!(names(decoded(store.controlled_by("owner-1"))), ["child"]);

    let final_state = (*owned("child", "owner-1")).clone();
    let Change { old, new, .. } = store.delete(feed, final_state).expect("a deletion");
    assert_eq!(object::name(&state(old)), "child");
    assert!(new.is_none());
    assert_eq!(store.controlled_by("owner-1").len(), 0);
    assert!(store.by_owner.is_empty());
    assert!(store.list(Some("ns")).is_empty());
    assert!(!store.objects.contains_key("ns"));
    assert_eq!(names(decoded(store.list(None))), ["b"]);
    assert_eq!(store.len(), 1);
}

#[test]
fn owner_index_follows_a_changed_controller_reference() {
    let (mut store, feed) = fed(&[owned("child", "owner-1")]);
    store.apply(feed, owned("child", "owner-2"));
    assert_eq!(store.controlled_by("owner-1").len(), 0);
    assert_eq!(names(decoded(store.controlled_by("owner-2"))), ["child"]);
    // A non-controller owner reference is not indexed.
    assert_eq!(store.controlled_by("other").len(), 0);
}

#[test]
fn orphans_are_indexed_by_namespace_until_adopted() {
    let (mut store, feed) = fed(&[
        config_map("a", "loose", "1", json!({})),
        config_map("b", "elsewhere", "1", json!({})),
        owned("child", "owner-1"),
    ]);
    assert_eq!(names(decoded(store.orphans(Some("a")))), ["loose"]);
    assert_eq!(names(decoded(store.orphans(None))), ["elsewhere", "loose"]);
    // Adopted (a controller reference added): no longer an orphan; released: one again.
    let mut adopted = (*config_map("a", "loose", "2", json!({}))).clone();
    adopted["metadata"]["ownerReferences"] = json!([{"uid": "owner-1", "controller": true, "kind": "K", "name": "o", "apiVersion": "v1"}]);
    store.apply(feed, Arc::new(adopted));
    assert!(store.orphans(Some("a")).is_empty());
    assert!(
        !store.orphans.contains_key("a"),
        "an empty namespace entry is dropped"
    );
    store.apply(feed, config_map("a", "loose", "3", json!({})));
    assert_eq!(names(decoded(store.orphans(Some("a")))), ["loose"]);
    store.delete(feed, (*config_map("a", "loose", "4", json!({}))).clone());
    assert!(store.orphans(Some("a")).is_empty());
}

#[test]
fn an_undecodable_object_finds_its_cached_version_by_name() {
    let (mut store, feed) = fed(&[config_map("ns", "a", "1", json!({}))]);
    let undecodable = |namespace: Option<&str>, name: Option<&str>| Undecodable {
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        uid: None,
        reason: "deep".into(),
    };
    assert!(store.named(&undecodable(Some("ns"), Some("a"))).is_some());
    assert!(store.named(&undecodable(None, Some("a"))).is_none());
    assert!(store.named(&undecodable(Some("ns"), None)).is_none());
    assert!(
        store
            .delete_named(feed, &undecodable(Some("ns"), None))
            .is_none()
    );
    let Change { old: removed, .. } = store
        .delete_named(feed, &undecodable(Some("ns"), Some("a")))
        .expect("a deletion");
    assert_eq!(object::name(&state(removed)), "a");
    assert_eq!(store.len(), 0);
}

#[test]
fn a_relist_reports_what_changed_while_the_watch_was_down() {
    let kept = config_map("ns", "kept", "1", json!({}));
    let touched = config_map("ns", "touched", "1", json!({}));
    let edited = config_map("ns", "edited", "1", json!({"k": "v"}));
    let gone = config_map("ns", "gone", "1", json!({}));
    let (mut store, feed) = fed(&[kept.clone(), touched, edited, gone]);

    let text = |store: &Store, name| store.held("ns", name).unwrap().object.text.clone().unwrap();
    let touched_again = config_map("ns", "touched", "2", json!({}));
    let relisted_touch = store.incoming(&touched_again);
    assert!(
        !Arc::ptr_eq(
            relisted_touch.object.text.as_ref().unwrap(),
            &text(&store, "touched")
        ),
        "a new version is serialized"
    );
    let edited_again = config_map("ns", "edited", "2", json!({"k": "w"}));
    let relisted_kept = store.incoming(&kept);
    assert!(
        Arc::ptr_eq(
            relisted_kept.object.text.as_ref().unwrap(),
            &text(&store, "kept")
        ),
        "the same version keeps the cached text"
    );
    let listed = vec![
        relisted_kept,
        relisted_touch,
        Incoming::of(&edited_again),
        Incoming::of(&config_map("other", "added", "1", json!({}))),
    ];

    let changes = store.replace(feed, listed, 0);
    assert_eq!(
        described(&changes),
        [
            (Some("edited".into()), Some("edited".into())),
            added("added"),
            deleted("gone"),
        ]
    );
    assert_eq!(state(changes[0].new.clone()), *edited_again);
    assert_eq!(store.len(), 4);
    assert!(read(&store, "ns", "gone").is_none());
    assert_eq!(read(&store, "ns", "kept").unwrap(), kept);
    assert_eq!(read(&store, "ns", "touched").unwrap(), touched_again);
}

#[test]
fn an_object_two_feeds_hold_is_held_and_reported_once() {
    let mut store = Store::default();
    let special = store.open_feed().unwrap();
    let teams = store.open_feed().unwrap();
    let both = config_map("ns", "both", "1", json!({}));

    assert_eq!(
        described(
            &store
                .apply(special, both.clone())
                .into_iter()
                .collect::<Vec<_>>()
        ),
        [added("both")]
    );
    // The second feed's copy of the same version is not news, and is not kept twice.
    let text = |store: &Store| {
        store
            .held("ns", "both")
            .unwrap()
            .object
            .text
            .clone()
            .unwrap()
    };
    let first_text = text(&store);
    let copy = config_map("ns", "both", "1", json!({}));
    assert!(store.apply(teams, copy).is_none());
    assert!(Arc::ptr_eq(&text(&store), &first_text));
    assert_eq!(store.len(), 1);

    // One feed letting go (the object stopped matching its selector) is not a deletion.
    assert!(store.delete(special, (*both).clone()).is_none());
    assert_eq!(store.len(), 1);
    // The last one is.
    let Change { old, new, .. } = store.delete(teams, (*both).clone()).expect("a deletion");
    assert!(old.is_some() && new.is_none());
    assert_eq!(store.len(), 0);
}

#[test]
fn closing_a_feed_removes_only_what_no_other_feed_holds() {
    let mut store = Store::default();
    let selected = store.open_feed().unwrap();
    let all = store.open_feed().unwrap();
    let special = config_map("ns", "special", "1", json!({}));
    let plain = config_map("ns", "plain", "1", json!({}));
    store.apply(selected, special.clone());
    // The feed of every object lists after the selecting feed: only the new object is news.
    let changes = store.replace(all, listing(&[&special, &plain]), 0);
    assert_eq!(described(&changes), [added("plain")]);

    // The selecting feed stops once the other holds everything: nothing changes.
    assert!(store.close_feed(selected).is_empty());
    assert_eq!(names(decoded(store.list(None))), ["plain", "special"]);

    // A feed closed alone takes its objects with it, as deletions.
    let changes = store.close_feed(all);
    assert_eq!(described(&changes), [deleted("plain"), deleted("special")]);
    assert_eq!(store.len(), 0);
}

/// What a sweep gives: (keys it named, names of the objects it left to be read).
fn swept(store: &Store, feeds: &[FeedSlot]) -> (Vec<ObjRef>, Vec<String>) {
    let (resource, _) = assignment(&["a"], "a");
    let (mut keys, mut kept) = (Vec::new(), Vec::new());
    for swept in store.sweep(&resource, feeds) {
        match swept {
            Swept::Selected(key) => keys.push(key),
            Swept::Kept(object) => kept.push(object.decoded()),
        }
    }
    (keys, names(kept))
}

#[test]
fn a_sweep_names_what_the_sweepers_feeds_hold_and_leaves_the_rest_to_be_read() {
    let mut store = Store::default();
    let mine = store.open_feed().unwrap();
    let others = store.open_feed().unwrap();
    let a = config_map("team", "a", "1", json!({}));
    let b = config_map("other", "b", "1", json!({}));
    let c = config_map("team", "c", "1", json!({}));
    store.replace(mine, listing(&[&a, &b]), 0);
    store.replace(others, listing(&[&b, &c]), 0);

    let (keys, kept) = swept(&store, &[mine]);
    let keys: Vec<(Option<&str>, &str)> = keys
        .iter()
        .map(|key| (key.namespace.as_deref(), key.name.as_str()))
        .collect();
    assert_eq!(keys, [(Some("other"), "b"), (Some("team"), "a")]);
    assert_eq!(kept, ["c"]);
    // Without feeds of its own, every object is to be read.
    assert_eq!(swept(&store, &[]), (vec![], names([a.clone(), b, c])));

    // A stopped feed holds nothing, even once its bit is another feed's.
    store.close_feed(mine);
    let taken = store.open_feed().unwrap();
    store.replace(taken, listing(&[&a]), 0);
    assert_eq!(swept(&store, &[mine]).0, []);
    // Nor is a feed of another view one of this view's (a type released, then watched again).
    let mut again = Store::default();
    let first = again.open_feed().unwrap();
    again.replace(first, listing(&[&a]), 0);
    assert_eq!(swept(&again, &[mine]).0, []);
}

#[test]
fn a_narrower_feed_taking_over_reports_only_what_leaves() {
    let mut store = Store::default();
    let old = store.open_feed().unwrap();
    let a = config_map("ns", "a", "1", json!({}));
    let b = config_map("ns", "b", "1", json!({}));
    store.replace(old, listing(&[&a, &b]), 0);
    // A controller's new selector matches `a` only: its feed starts before the old one stops.
    let new = store.open_feed().unwrap();
    assert!(store.replace(new, listing(&[&a]), 0).is_empty());
    assert_eq!(described(&store.close_feed(old)), [deleted("b")]);
    assert_eq!(names(decoded(store.list(None))), ["a"]);
}

#[test]
fn a_closed_feeds_late_changes_are_ignored_even_when_its_bit_is_reused() {
    let mut store = Store::default();
    let first = store.open_feed().unwrap();
    store.close_feed(first);
    let second = store.open_feed().unwrap();
    assert_eq!(first.bit, second.bit, "the bit is reused");
    assert_ne!(first.id, second.id);
    // The first feed's task was still finishing an event when it was stopped.
    assert!(
        store
            .apply(first, config_map("ns", "late", "1", json!({})))
            .is_none()
    );
    assert!(
        store
            .replace(
                first,
                listing(&[&config_map("ns", "late", "1", json!({}))]),
                0,
            )
            .is_empty()
    );
    assert_eq!(store.len(), 0);
    assert!(store.close_feed(first).is_empty());
    // The second feed is untouched by it.
    assert!(
        store
            .apply(second, config_map("ns", "x", "1", json!({})))
            .is_some()
    );
}

#[test]
fn a_view_has_at_most_its_number_of_feeds() {
    let mut store = Store::default();
    let feeds: Vec<FeedSlot> = (0..MAX_FEEDS).map(|_| store.open_feed().unwrap()).collect();
    assert!(store.open_feed().is_none());
    store.close_feed(feeds[7]);
    assert_eq!(store.open_feed().map(|feed| feed.bit), Some(7));
}

#[test]
fn a_relist_of_one_feed_releases_what_it_no_longer_matches_only_for_it() {
    let mut store = Store::default();
    let mine = store.open_feed().unwrap();
    let theirs = store.open_feed().unwrap();
    let shared = config_map("ns", "shared", "1", json!({}));
    let only_mine = config_map("ns", "only-mine", "1", json!({}));
    store.replace(mine, listing(&[&shared, &only_mine]), 0);
    store.replace(theirs, listing(&[&shared]), 0);
    // My feed re-lists after its watch broke; neither object matches it any more.
    assert_eq!(
        described(&store.replace(mine, vec![], 0)),
        [deleted("only-mine")]
    );
    assert_eq!(names(decoded(store.list(None))), ["shared"]);
}

#[test]
fn a_feed_behind_another_does_not_set_an_object_back() {
    let mut store = Store::default();
    let ahead = store.open_feed().unwrap();
    let behind = store.open_feed().unwrap();
    store.apply(ahead, config_map("ns", "a", "1", json!({"k": "1"})));
    store.apply(ahead, config_map("ns", "a", "3", json!({"k": "3"})));
    // The other feed delivers version 2 late: held by it too, but the view stays at 3.
    assert!(
        store
            .apply(behind, config_map("ns", "a", "2", json!({"k": "2"})))
            .is_none()
    );
    assert_eq!(read(&store, "ns", "a").unwrap()["data"]["k"], "3");
    // A new object under the same name is no older version.
    let mut recreated = (*config_map("ns", "a", "2", json!({"k": "new"}))).clone();
    recreated["metadata"]["uid"] = "another".into();
    assert!(store.apply(behind, Arc::new(recreated)).is_some());
    // A deletion the view never held is no news.
    assert!(
        store
            .delete(ahead, (*config_map("ns", "never", "9", json!({}))).clone())
            .is_none()
    );
}

#[test]
fn objects_are_kept_as_their_text_and_read_back_as_they_came() {
    let (mut store, feed) = fed(&[]);
    let object = config_map(
        "ns",
        "a",
        "1",
        json!({"float": 1.5, "whole": 2.0, "big": u64::MAX, "negative": -3,
               "digits": 0.945_270_695_553_922_3, "tiny": 5e-324, "huge": f64::MAX,
               "text": "ünïcode \"quoted\"", "nested": {"list": [1, {"x": null}]}}),
    );
    store.apply(feed, object.clone());
    let held = store.held("ns", "a").unwrap().object.clone();
    assert_eq!(held.uid.as_deref(), Some("uid-a"));
    assert_eq!(held.resource_version.as_deref(), Some("1"));
    // Read back from the text alone, as after the decoded copy is dropped.
    store.decoded.get_mut().forget(held.text.as_ref().unwrap());
    assert_eq!(read(&store, "ns", "a").unwrap(), object);
    assert_eq!(decoded(store.list(None)), std::slice::from_ref(&object));
    // Floats read back bit for bit, so a version read from text compares equal to the same
    // version from the watch (a bookkeeping-only update stays no news).
    let mut touched = (*object).clone();
    touched["metadata"]["resourceVersion"] = "2".into();
    assert!(store.apply(feed, Arc::new(touched)).is_none());
}

#[test]
fn only_recently_used_objects_stay_decoded_and_scans_do_not_count_as_use() {
    let (mut store, feed) = fed(&[]);
    let filler = "x".repeat(64 << 10);
    let count = 2 * DECODED_BYTES / filler.len();
    for i in 0..count {
        let name = format!("cm-{i:03}");
        store.apply(feed, config_map("ns", &name, "1", json!({"k": filler})));
    }
    let recent = |store: &mut Store| {
        let decoded = store.decoded.get_mut();
        assert!(decoded.bytes <= DECODED_BYTES);
        decoded.recent.len()
    };
    let kept = recent(&mut store);
    assert!(kept > 0 && kept < count, "{kept} of {count} stay decoded");
    let text = |store: &Store, name: &str| store.held("ns", name).unwrap().object.text.clone();
    let is_decoded = |store: &mut Store, text: &Option<Arc<str>>| {
        let text = text.as_ref().unwrap();
        store.decoded.get_mut().recent.contains(&address(text))
    };
    // Watch events fill the set and push nothing out: the last did not fit.
    let (first, last) = (
        text(&store, "cm-000"),
        text(&store, &format!("cm-{:03}", count - 1)),
    );
    assert!(is_decoded(&mut store, &first));
    assert!(!is_decoded(&mut store, &last));
    assert_eq!(read(&store, "ns", "cm-000").unwrap()["data"]["k"], filler);
    // A read keeps what it decoded, and pushes out the least recently used.
    let second = text(&store, "cm-001");
    let decoded = Kept::Json(last.clone().unwrap()).decoded();
    store.remember([(last.clone().unwrap(), decoded)]);
    assert!(is_decoded(&mut store, &last));
    assert!(
        !is_decoded(&mut store, &second),
        "read less recently than cm-000"
    );
    assert!(is_decoded(&mut store, &first));
    assert_eq!(read(&store, "ns", "cm-001").unwrap()["data"]["k"], filler);
    // A scan hands out what is decoded as it is, and leaves the order of use alone.
    let least = |store: &mut Store| *store.decoded.get_mut().recent.peek_lru().unwrap().0;
    let before = least(&mut store);
    let listed = store.list(None);
    assert_eq!(listed.len(), count);
    let decoded_in_list = listed
        .iter()
        .filter(|kept| matches!(kept, Kept::Decoded(_)))
        .count();
    assert_eq!(decoded_in_list, recent(&mut store));
    assert_eq!(least(&mut store), before);
}

#[test]
fn an_object_replaced_in_the_view_is_not_read_in_its_old_form() {
    let (mut store, feed) = fed(&[config_map("ns", "a", "1", json!({"k": "old"}))]);
    let old_text = store.held("ns", "a").unwrap().object.text.clone().unwrap();
    assert_eq!(read(&store, "ns", "a").unwrap()["data"]["k"], "old");
    store.apply(feed, config_map("ns", "a", "2", json!({"k": "new"})));
    assert_eq!(read(&store, "ns", "a").unwrap()["data"]["k"], "new");
    assert!(!store.decoded.get_mut().recent.contains(&address(&old_text)));
    // A relisted edit is read in its new form too.
    let relisted = config_map("ns", "a", "3", json!({"k": "relisted"}));
    store.replace(feed, listing(&[&relisted]), 0);
    assert_eq!(read(&store, "ns", "a").unwrap(), relisted);
}

/// A store of `replica`'s share (of replicas `a` and `b`) for a controller selecting the
/// ConfigMaps labelled `team: x`.
fn shared(replica: &str) -> (Store, FeedSlot) {
    let mut store = Store::default();
    let config_maps = crate::resources::StaticResolver::with_builtins()
        .find_kind("v1", "ConfigMap")
        .expect("ConfigMap is built in");
    let assignment = Arc::new(crate::runtime::replicas::shard::Assignment::of(
        &["a", "b"],
        replica,
    ));
    store.reshape(|share| {
        share.assign(&config_maps, assignment);
        share.add(sharer("x"));
    });
    let feed = store.open_feed().unwrap();
    (store, feed)
}

fn sharer(team: &str) -> crate::runtime::watch::share::Sharer {
    let labels: crate::selector::LabelSelector =
        serde_json::from_value(json!({"matchLabels": {"team": team}})).unwrap();
    crate::runtime::watch::share::Sharer {
        controller: crate::runtime::keys::ControllerId::new(crate::api::TEST_KIND, "d"),
        selections: vec![crate::api::Selection {
            labels: Some(labels),
            annotations: None,
        }],
    }
}

fn team_map(name: &str, version: &str, team: &str) -> Arc<Value> {
    Arc::new(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "ns", "name": name, "uid": format!("uid-{name}"),
                     "resourceVersion": version, "labels": {"team": team}},
    }))
}

/// A selected object named `<prefix>-<n>` that replica a's `store` does not keep: b's.
fn of_replica_b(store: &Store, prefix: &str, version: &str) -> Arc<Value> {
    (0..)
        .map(|i| team_map(&format!("{prefix}-{i}"), version, "x"))
        .find(|object| !store.share().keeps(object))
        .expect("some name is b's")
}

/// The names of the objects a store holds whole.
fn whole(store: &Store) -> Vec<String> {
    names(decoded(store.list(None)))
}

#[test]
fn sharded_replicas_each_keep_the_selected_objects_they_own_and_know_the_rest_by_name() {
    let objects: Vec<Arc<Value>> = (0..40)
        .map(|i| team_map(&format!("cm-{i:02}"), "1", if i < 30 { "x" } else { "y" }))
        .collect();
    let (mut a, feed_a) = shared("a");
    let (mut b, feed_b) = shared("b");
    // a follows the watch's events, b lists them.
    let announced: Vec<Change> = objects
        .iter()
        .filter_map(|object| a.apply(feed_a, object.clone()))
        .collect();
    let listed = objects.iter().map(|object| b.incoming(object)).collect();
    let kept_under = b.share().generation();
    let announced_b = b.replace(feed_b, listed, kept_under);
    let (held_a, held_b) = (whole(&a), whole(&b));
    // Between them the selected ones, each once, about half each; none of team y.
    let mut both: Vec<String> = held_a.iter().chain(&held_b).cloned().collect();
    both.sort();
    let selected: Vec<String> = (0..30).map(|i| format!("cm-{i:02}")).collect();
    assert_eq!(both, selected);
    assert!(
        (8..=22).contains(&held_a.len()),
        "{} of 30 on a",
        held_a.len()
    );
    assert_eq!(a.len(), held_a.len());
    assert_eq!((a.known(), b.known()), (40, 40));
    // Only what a holds is announced, read or listed there.
    let new = |changes: &[Change]| {
        names(
            changes
                .iter()
                .map(|change| change.new.clone().unwrap().decoded()),
        )
    };
    assert_eq!(new(&announced), held_a);
    assert_eq!(new(&announced_b), held_b);
    let elsewhere = &held_b[0];
    assert!(read(&a, "ns", elsewhere).is_none());
    assert!(read(&a, "ns", &held_a[0]).is_some());
    // An object of b's share changes or goes without a word on a.
    let changed = team_map(elsewhere, "2", "x");
    assert!(a.apply(feed_a, changed.clone()).is_none());
    assert!(a.delete(feed_a, (*changed).clone()).is_none());
    assert_eq!(a.known(), 39);
    // A third replica joins: a only gives items away, so nothing is listed again.
    let config_maps = crate::resources::StaticResolver::with_builtins()
        .find_kind("v1", "ConfigMap")
        .unwrap();
    let three = Arc::new(crate::runtime::replicas::shard::Assignment::of(
        &["a", "b", "c"],
        "a",
    ));
    assert!(!a.reshape(|share| share.assign(&config_maps, three)));
    assert!(whole(&a).len() < held_a.len());
    assert!(whole(&a).iter().all(|name| held_a.contains(name)));
}

#[test]
fn an_object_enters_and_leaves_a_replicas_share_as_its_selection_would() {
    let (mut a, feed) = shared("a");
    let (b, _) = shared("b");
    // A name a owns: b, with the same sharers, does not keep it.
    let name = (0..)
        .map(|i| format!("cm-{i}"))
        .find(|name| a.share().keeps(&team_map(name, "1", "x")))
        .unwrap();
    assert!(!b.share().keeps(&team_map(&name, "1", "x")));
    assert!(a.apply(feed, team_map(&name, "1", "y")).is_none());
    let relabelled = a.apply(feed, team_map(&name, "2", "x"));
    assert_eq!(
        described(&relabelled.into_iter().collect::<Vec<_>>()),
        [added(&name)]
    );
    let left = a.apply(feed, team_map(&name, "3", "y"));
    assert_eq!(
        described(&left.into_iter().collect::<Vec<_>>()),
        [deleted(&name)]
    );
    assert!(read(&a, "ns", &name).is_none());
    assert_eq!((a.len(), a.known()), (0, 1));
}

/// The view's type, and an assignment of `members` as `me` sees it.
fn assignment(members: &[&str], me: &str) -> (ResourceType, Arc<Assignment>) {
    let config_maps = crate::resources::StaticResolver::with_builtins()
        .find_kind("v1", "ConfigMap")
        .unwrap();
    (config_maps, Arc::new(Assignment::of(members, me)))
}

/// Fills in `store` from a list of `objects`, as a refill does: the changes it reports.
fn filled_in(store: &mut Store, objects: &[Arc<Value>]) -> Vec<Change> {
    let wanted = store.needs_fill().expect("a fill is wanted");
    let changes = objects
        .iter()
        .filter_map(|object| {
            let incoming = match store.refill(object) {
                Refill::Take => Some(Incoming::of(object)),
                Refill::Drop => None,
                Refill::Nothing => return None,
                Refill::Behind => panic!("{object} is behind"),
            };
            match store.fill(object, incoming) {
                Fill::Done(change) => change,
                Fill::Behind => panic!("{object} is behind"),
            }
        })
        .collect();
    store.filled(wanted);
    changes
}

/// 30 selected objects, `cm-00` to `cm-29`, at `version`.
fn thirty(version: &str) -> Vec<Arc<Value>> {
    (0..30)
        .map(|i| team_map(&format!("cm-{i:02}"), version, "x"))
        .collect()
}

/// Replica a's store (of a and b) fed [`thirty`] objects at `version`: the store, its feed,
/// the objects, and the names it holds whole.
fn a_of_two(version: &str) -> (Store, FeedSlot, Vec<Arc<Value>>, Vec<String>) {
    let objects = thirty(version);
    let (mut a, feed) = shared("a");
    for object in &objects {
        a.apply(feed, object.clone());
    }
    let held = whole(&a);
    (a, feed, objects, held)
}

#[test]
fn a_new_assignment_drops_what_moved_away_and_fills_in_what_came() {
    let (mut a, _, objects, before) = a_of_two("1");
    assert!(a.needs_fill().is_none());
    // b leaves: everything is a's, known so far by name where b owned it.
    let (config_maps, alone) = assignment(&["a"], "a");
    assert!(a.reshape(|share| share.assign(&config_maps, alone)));
    assert_eq!(whole(&a), before, "nothing is taken before it is listed");
    let filled = filled_in(&mut a, &objects);
    assert_eq!(a.len(), 30);
    assert_eq!(a.needs_fill(), None);
    assert_eq!(filled.len(), 30 - before.len());
    assert!(
        filled
            .iter()
            .all(|change| change.old.is_none() && change.new.is_some())
    );
    // a joins b again: what is b's leaves a without a word, and the indexes with it.
    let (_, back) = assignment(&["a", "b"], "a");
    assert!(!a.reshape(|share| share.assign(&config_maps, back)));
    assert_eq!(whole(&a), before);
    assert_eq!(a.orphans(None).len(), before.len());
    // Kept whole again (another controller needs every object): all of it is wanted, and a
    // fill that fails is wanted again until one succeeds.
    assert!(a.reshape(|share| {
        share.keep_whole();
    }));
    assert!(a.reshape(|share| {
        share.keep_whole();
    }));
    assert!(
        objects
            .iter()
            .all(|object| (a.refill(object) == Refill::Take)
                != before.contains(&object::name(object).to_string()))
    );
    filled_in(&mut a, &objects);
    assert_eq!(a.len(), 30);
}

#[test]
fn a_list_behind_the_view_is_not_taken_and_an_object_is_read_alone() {
    let (mut store, feed) = shared("a");
    // A name b owns, known to a by name at version 5.
    let late = of_replica_b(&store, "late", "5");
    store.apply(feed, late.clone());
    let (config_maps, alone) = assignment(&["a"], "a");
    assert!(store.reshape(|share| share.assign(&config_maps, alone)));
    let mut older = (*late).clone();
    older["metadata"]["resourceVersion"] = json!("4");
    assert_eq!(store.refill(&older), Refill::Behind);
    assert!(matches!(
        store.fill(&older, Some(Incoming::of(&older))),
        Fill::Behind
    ));
    assert_eq!(store.refill(&late), Refill::Take);
}

#[test]
fn a_relist_taken_across_a_change_of_the_share_keeps_what_it_held_until_filled_in() {
    let (mut a, feed, objects, before) = a_of_two("1");
    // A re-list decides what to keep, then the members change before it is taken: a is alone.
    let kept_under = a.share().generation();
    let edited = thirty("2");
    let listed: Vec<Incoming> = edited.iter().map(|object| a.incoming(object)).collect();
    let (config_maps, alone) = assignment(&["a"], "a");
    a.reshape(|share| share.assign(&config_maps, alone));
    filled_in(&mut a, &objects);
    assert_eq!(a.len(), 30);
    // The re-list left out what b owned when it began: that says nothing of it, so it stays
    // held (as version 1) until a fill takes version 2.
    a.replace(feed, listed, kept_under);
    assert_eq!(a.len(), 30, "nothing held is lost");
    assert!(a.needs_fill().is_some());
    let changes = filled_in(&mut a, &edited);
    assert_eq!(a.len(), 30);
    assert!(
        decoded(a.list(None))
            .iter()
            .all(|object| object["metadata"]["resourceVersion"] == "2"),
        "the list's versions are taken"
    );
    assert!(
        changes.is_empty(),
        "only the resourceVersions changed: {changes:?}"
    );
    assert!(!before.is_empty() && before.len() < 30);
}

#[test]
fn a_relist_taken_across_a_change_takes_nothing_that_moved_away() {
    let (config_maps, alone) = assignment(&["a"], "a");
    let (mut a, feed) = shared("a");
    a.reshape(|share| share.assign(&config_maps, alone));
    let objects = thirty("1");
    for object in &objects {
        a.apply(feed, object.clone());
    }
    assert_eq!(a.len(), 30);
    // A re-list takes everything whole, then b joins before it is taken.
    let kept_under = a.share().generation();
    let listed: Vec<Incoming> = objects.iter().map(|object| a.incoming(object)).collect();
    let (_, two) = assignment(&["a", "b"], "a");
    a.reshape(|share| share.assign(&config_maps, two));
    let share = whole(&a);
    assert!(share.len() < 30);
    let changes = a.replace(feed, listed, kept_under);
    assert!(changes.is_empty(), "nothing moved back in: {changes:?}");
    assert_eq!(whole(&a), share);
    assert_eq!(a.known(), 30);
}

#[test]
fn a_relist_passing_over_an_object_known_by_name_keeps_knowing_it() {
    let (mut store, feed) = shared("a");
    let theirs = of_replica_b(&store, "theirs", "1");
    store.apply(feed, theirs.clone());
    assert_eq!((store.len(), store.known()), (0, 1));
    let passed_over = Undecodable {
        namespace: Some("ns".into()),
        name: Some(object::name(&theirs).into()),
        uid: Some(format!("uid-{}", object::name(&theirs))),
        reason: "not decodable".into(),
    };
    let listed = store.named(&passed_over).into_iter().collect();
    let kept_under = store.share().generation();
    assert!(store.replace(feed, listed, kept_under).is_empty());
    assert_eq!(
        store.known(),
        1,
        "still known: a re-list passing it over is not its deletion"
    );
    // Its deletion, by name, still finds it.
    assert!(store.delete_named(feed, &passed_over).is_none());
    assert_eq!(store.known(), 0);
}
