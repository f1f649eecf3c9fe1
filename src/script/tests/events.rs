//! `event` in both languages: the same Events collected, the same errors for bad arguments.

use super::*;
use crate::api::EventType;
use serde_json::json;

#[test]
fn events_are_collected_the_same_in_both_languages() {
    let rhai = r#"
        event("Normal", "Configured", "port " + request.port);
        event("Warning", "NoBackend", #{ port: request.port });
        #{}
    "#;
    let lua = r#"
        event("Normal", "Configured", "port " .. request.port)
        event("Warning", "NoBackend", { port = request.port })
        return {}
    "#;
    for (language, code) in [(Language::Rhai, rhai), (Language::Lua, lua)] {
        let mut call = context();
        let events = EventSink::new();
        call.scope.events = events.clone();
        run_with(language, code, json!({"port": 80}), &call).unwrap();
        let collected: Vec<_> = events
            .events()
            .into_iter()
            .map(|e| (e.type_, e.reason, e.message))
            .collect();
        assert_eq!(
            collected,
            [
                (EventType::Normal, "Configured".into(), "port 80".into()),
                (
                    EventType::Warning,
                    "NoBackend".into(),
                    r#"{"port":80}"#.into()
                ),
            ],
            "{language}"
        );
    }
}

#[test]
fn bad_arguments_are_errors_naming_the_helper_and_the_argument() {
    for (args, wanted) in [
        (
            r#""Info", "Ready", "m""#,
            r#"event: the type must be "Normal" or "Warning", got "Info""#,
        ),
        (
            r#""Normal", "not camel", "m""#,
            r#"event: the reason must be 1 to 128 letters"#,
        ),
        (r#""Normal", 3, "m""#, "event: the reason must be a string"),
    ] {
        for (language, code) in [
            (Language::Rhai, format!("event({args}); #{{}}")),
            (Language::Lua, format!("event({args}) return {{}}")),
        ] {
            let error = run(language, &code, json!({})).unwrap_err().to_string();
            assert!(error.contains(wanted), "{language}: {error}");
        }
    }
}
