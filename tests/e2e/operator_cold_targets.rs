//! A decorator's targets that are no longer among the cache's recently used objects: the sync
//! decodes only their head and lends the hook their text (docs/performance.md, "Syncs that
//! read only the head"). Their hooks must still see every field, in both languages, whether
//! the script is given `request.object` or reads it through a helper.

use crate::support::manifests::{self, inline_sync};
use crate::support::operator::{apply, operator, wait_for};
use crate::support::transform::config_map;
use crate::support::{client, test_namespace, unique_name};
use serde_json::{Value, json};

/// Labels each selected ConfigMap with `reads` (an expression of the script's language) and
/// its length.
fn decorator(name: &str, language: &str, reads: &str) -> Value {
    let script = match language {
        "rhai" => format!(
            r#"let k = {reads};
            #{{ labels: #{{ "example.com/k": k, "example.com/n": `${{k.len()}}` }} }}"#
        ),
        _ => format!(
            r#"local k = {reads}
            return {{ labels = {{ ["example.com/k"] = k, ["example.com/n"] = tostring(#k) }} }}"#
        ),
    };
    manifests::decorator(name, ("v1", "configmaps"), inline_sync(language, &script))
}

#[tokio::test]
async fn hooks_of_targets_read_as_text_see_every_field_in_both_languages() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "cold").await;
    // Rhai reads through a helper (the object is not converted: `Json::at` on the text), Lua
    // is given the object (decoded from the text before the call).
    let controllers = [
        (
            unique_name("cold-rhai"),
            "rhai",
            r#"get_path(request, "object.data.k")"#,
        ),
        (unique_name("cold-lua"), "lua", "request.object.data.k"),
    ];
    let value = |controller: &str, target: usize| format!("{controller}-{target}");
    for (name, language, _) in &controllers {
        apply(&client, &decorator(name, language, "\"first\"")).await;
        for target in 0..3 {
            let labels = json!({"test-controller": name});
            let data = json!({"k": value(name, target)});
            let like = config_map(&namespace, &format!("{name}-{target}"), labels, data);
            apply(&client, &like).await;
            wait_for(&client, &like, "labelled by the first script", |o| {
                o["metadata"]["labels"]["example.com/k"] == "first"
            })
            .await;
        }
    }

    // More ConfigMap text than the cache keeps decoded (2 MiB a type) comes after them, in
    // the same view (a third decorator selects it, and labels it, so its events are in):
    // the targets are read from their text from now on.
    let fillers = unique_name("cold-filler");
    apply(&client, &decorator(&fillers, "rhai", "\"filled\"")).await;
    let filler = "x".repeat(64 * 1024);
    for index in 0..40 {
        let labels = json!({"test-controller": fillers});
        let like = config_map(
            &namespace,
            &format!("{fillers}-{index}"),
            labels,
            json!({"filler": filler}),
        );
        apply(&client, &like).await;
        wait_for(&client, &like, "a filler labelled", |o| {
            o["metadata"]["labels"]["example.com/k"] == "filled"
        })
        .await;
    }

    for (name, language, reads) in &controllers {
        apply(&client, &decorator(name, language, reads)).await;
    }
    for (name, language, _) in &controllers {
        for target in 0..3 {
            let like = config_map(
                &namespace,
                &format!("{name}-{target}"),
                json!({}),
                json!({}),
            );
            let expected = value(name, target);
            let length = expected.len().to_string();
            wait_for(
                &client,
                &like,
                &format!("{language}: labelled from its data"),
                |o| {
                    let labels = &o["metadata"]["labels"];
                    labels["example.com/k"] == expected.as_str()
                        && labels["example.com/n"] == length.as_str()
                },
            )
            .await;
        }
    }
}
