use super::*;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn words(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn dollar_word_splits_and_braced_stays_one_word() {
    let e = env(&[("A", "--x=1  --y='a b'"), ("B", "p q")]);
    let exec = words(&[
        "/bin/k",
        "$A",
        "${B}",
        "--z=${B}!",
        "$UNSET",
        "${UNSET}",
        "$$HOME",
        "pre$A",
    ]);
    assert_eq!(
        expand_command(&exec, &e),
        words(&["/bin/k", "--x=1", "--y=a b", "p q", "--z=p q!", "", "$HOME", "pre$A"])
    );
    // `:` turns expansion off.
    assert_eq!(
        expand_command(&words(&[":/bin/k", "$A"]), &e),
        words(&["/bin/k", "$A"])
    );
}

#[test]
fn split_args_quotes_and_escapes() {
    assert_eq!(
        split_args(r#" --a="b c"  --d='e "f"' g\ h --i='unterminated"#),
        words(&["--a=b c", r#"--d=e "f""#, "g h", "--i=unterminated"])
    );
    assert_eq!(split_args("  "), Vec::<String>::new());
    assert_eq!(split_args("''"), words(&[""]));
}

#[test]
fn environment_assignment_round_trips_through_the_parser() {
    for v in [
        "--node-labels='a b' --x=\"q\"",
        r#"--x="q" back\slash 50% $HOME"#,
        "",
    ] {
        let unit = format!(
            "[Service]\nEnvironment={}\nExecStart=/bin/k $V\n",
            environment_assignment("V", v)
        );
        let s = Service::parse(&[("u".into(), unit)], "k.service").unwrap();
        assert_eq!(s.environment, vec![("V".to_string(), v.to_string())], "{v}");
    }
}

#[test]
fn dropins_reset_exec_start_and_environment_files_override() {
    let unit = "[Service]\nEnvironment=A=1 \"B=two words\"\nExecStart=/bin/old $A\n";
    let dropin = "[Service]\nExecStart=\nExecStart=/bin/new \\\n  # a comment in a continuation\n  $A ${B}\nEnvironment='A=3'\n";
    let s = Service::parse(
        &[("u".into(), unit.into()), ("d".into(), dropin.into())],
        "k.service",
    )
    .unwrap();
    assert_eq!(s.exec_start, words(&["/bin/new", "$A", "${B}"]));
    let mut e: BTreeMap<String, String> = s.environment.into_iter().collect();
    assert_eq!(
        expand_command(&s.exec_start, &e),
        words(&["/bin/new", "3", "two words"])
    );
    for (k, v) in parse_env_file("f", "# c\nA=\"from file\" \nB='x'\\ y  \n").unwrap() {
        e.insert(k, v);
    }
    assert_eq!(e["A"], "from file");
    assert_eq!(e["B"], "x y");
}

#[test]
fn errors_name_file_and_line() {
    let two = "[Service]\nExecStart=/a\nExecStart=/b\n";
    let e = Service::parse(&[("u.service".into(), two.into())], "u.service")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("u.service:3") && e.contains("empty ExecStart="),
        "{e}"
    );
    let spec = "[Service]\nExecStart=/a %Z\n";
    let e = Service::parse(&[("u".into(), spec.into())], "u.service")
        .unwrap_err()
        .to_string();
    assert!(e.contains("u:2") && e.contains("%Z"), "{e}");
    let none = "[Unit]\nDescription=x\n";
    assert!(Service::parse(&[("u".into(), none.into())], "u.service").is_err());
}

#[test]
fn specifiers_resolve() {
    assert_eq!(
        specifiers("50%% %n %p", "kubelet.service").unwrap(),
        "50% kubelet.service kubelet"
    );
}
