//! The names of every setting of the pinned VPC CNI, as checked in (`vpc_cni_names.txt`), and,
//! in tests, their extraction from the pinned source, so that a name cannot slip through:
//!
//! - `readme`: a `#### \`NAME\`` heading of the README's "CNI Configuration Variables";
//! - `manifest`: an `env` entry of a container of `config/master/aws-k8s-cni.yaml` (the
//!   `aws-vpc-cni-init` init container, `aws-node`, the network policy agent);
//! - `chart`: a key of `env` / `init.env` in `charts/aws-vpc-cni/values.yaml`, or a literal
//!   `env` entry of its DaemonSet template;
//! - `code`: a variable the programs of the `aws-node` image read (`cmd/aws-k8s-agent`,
//!   `cmd/aws-vpc-cni`, `cmd/aws-vpc-cni-init`, `pkg/`, `utils/`; not the separately deployed
//!   `cni-metrics-helper`): an `env…`/`…EnvVar` string constant, or a literal passed to
//!   `os.Getenv` / `os.LookupEnv`.
//!
//! The test `vpc_cni_names_match_the_pinned_source` extracts them again from the module of
//! `lab/vpc-cni/go.mod` in the Go module cache and compares; `UPDATE_VPC_CNI_NAMES=1` rewrites
//! the file. Each name's status in vpcnet is declared in `vpc_cni.rs` (or, implemented, in
//! `config.rs`).

/// The checked-in list: a header of `#` lines, then `NAME sources` lines.
pub const FILE: &str = include_str!("vpc_cni_names.txt");

/// Every name of [`FILE`], in its (sorted) order.
pub fn names() -> impl Iterator<Item = &'static str> {
    FILE.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
}

/// The VPC CNI version the list was extracted from (its `# version:` header line).
pub fn version() -> Option<&'static str> {
    FILE.lines()
        .find_map(|l| l.strip_prefix("# version: "))
        .map(str::trim)
}

#[cfg(test)]
mod extract {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    /// Names → the kinds of source naming them.
    pub type Found = BTreeMap<String, BTreeSet<&'static str>>;

    /// Whether `s` looks like an environment variable name (`ENABLE_IPv6` has lower case).
    fn is_var(s: &str) -> bool {
        s.len() > 2
            && s.starts_with(|c: char| c.is_ascii_uppercase())
            && s.contains('_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    }

    fn add(found: &mut Found, name: &str, source: &'static str) {
        if is_var(name) {
            found.entry(name.to_string()).or_default().insert(source);
        }
    }

    /// `#### \`NAME\`` headings of the README section "CNI Configuration Variables".
    pub fn readme(text: &str, found: &mut Found) {
        let mut inside = false;
        for line in text.lines() {
            if line.starts_with("## ") {
                inside = line.starts_with("## CNI Configuration Variables");
            } else if inside {
                if let Some(rest) = line.strip_prefix("#### `") {
                    add(found, rest.split('`').next().unwrap_or(""), "readme");
                }
            }
        }
    }

    /// `env[].name` of every init container and container of every document of a manifest.
    pub fn manifest(text: &str, found: &mut Found) {
        use serde::Deserialize;
        for doc in serde_yaml::Deserializer::from_str(text) {
            let v = serde_yaml::Value::deserialize(doc).expect("manifest is YAML");
            let pod = &v["spec"]["template"]["spec"];
            for list in ["initContainers", "containers"] {
                for c in pod[list].as_sequence().into_iter().flatten() {
                    for e in c["env"].as_sequence().into_iter().flatten() {
                        add(found, e["name"].as_str().unwrap_or(""), "manifest");
                    }
                }
            }
        }
    }

    /// Keys of `env` and `init.env` in the chart's values.
    pub fn chart_values(text: &str, found: &mut Found) {
        let v: serde_yaml::Value = serde_yaml::from_str(text).expect("values.yaml is YAML");
        for env in [&v["env"], &v["init"]["env"]] {
            for k in env.as_mapping().into_iter().flat_map(|m| m.keys()) {
                add(found, k.as_str().unwrap_or(""), "chart");
            }
        }
    }

    /// Literal `- name: NAME` entries followed by `value:` or `valueFrom:` in a template
    /// (not YAML until rendered).
    pub fn chart_template(text: &str, found: &mut Found) {
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for w in lines.windows(2) {
            if let Some(name) = w[0].strip_prefix("- name: ") {
                if w[1].starts_with("value:") || w[1].starts_with("valueFrom:") {
                    add(found, name.trim(), "chart");
                }
            }
        }
    }

    /// The functions of the VPC CNI that read a variable named by their first argument.
    const READERS: [&str; 8] = [
        "os.Getenv(",
        "os.LookupEnv(",
        "GetBoolAsStringEnvVar(",
        "GetIntFromStringEnvVar(",
        "GetEnv(",
        "parseBoolEnvVar(",
        "getBoolEnvVar(",
        "parseCIDRString(",
    ];

    /// Identifiers passed as the variable name to one of [`READERS`] (`utils.` dropped).
    pub fn reader_args(text: &str, out: &mut BTreeSet<String>) {
        for r in READERS {
            for (i, _) in text.match_indices(r) {
                let arg: String = text[i + r.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
                    .collect();
                let arg = arg.rsplit('.').next().unwrap_or("");
                if !arg.is_empty() {
                    out.insert(arg.to_string());
                }
            }
        }
    }

    /// Environment variable names in Go source: string constants named `env…`/`Env…`/`…Env`/
    /// `…EnvVar` or passed to a reader (`readers`, from [`reader_args`]), and literals passed
    /// to `os.Getenv` / `os.LookupEnv`.
    pub fn go(text: &str, readers: &BTreeSet<String>, found: &mut Found) {
        for line in text.lines() {
            let l = line.trim();
            let l = l
                .strip_prefix("const ")
                .or_else(|| l.strip_prefix("var "))
                .unwrap_or(l)
                .trim();
            if let Some((ident, value)) = l.split_once('=') {
                let ident = ident.trim();
                let named = ident.starts_with("env")
                    || ident.starts_with("Env")
                    || ident.ends_with("Env")
                    || ident.ends_with("EnvVar")
                    || readers.contains(ident);
                let value = value.trim();
                if named
                    && ident.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && value.starts_with('"')
                {
                    add(found, value[1..].split('"').next().unwrap_or(""), "code");
                }
            }
            for call in ["os.Getenv(\"", "os.LookupEnv(\""] {
                for (i, _) in line.match_indices(call) {
                    let rest = &line[i + call.len()..];
                    add(found, rest.split('"').next().unwrap_or(""), "code");
                }
            }
        }
    }

    /// Every non-test `.go` file under `dir`.
    fn go_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                go_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "go")
                && !p.to_string_lossy().ends_with("_test.go")
            {
                out.push(p);
            }
        }
    }

    /// Every name of the module source at `root`.
    pub fn all(root: &Path) -> Found {
        let read = |rel: &str| {
            std::fs::read_to_string(root.join(rel))
                .unwrap_or_else(|e| panic!("{}: {e}", root.join(rel).display()))
        };
        let mut found = Found::new();
        readme(&read("README.md"), &mut found);
        manifest(&read("config/master/aws-k8s-cni.yaml"), &mut found);
        chart_values(&read("charts/aws-vpc-cni/values.yaml"), &mut found);
        chart_template(
            &read("charts/aws-vpc-cni/templates/daemonset.yaml"),
            &mut found,
        );
        let mut files = Vec::new();
        for dir in [
            "cmd/aws-k8s-agent",
            "cmd/aws-vpc-cni",
            "cmd/aws-vpc-cni-init",
            "pkg",
            "utils",
        ] {
            go_files(&root.join(dir), &mut files);
        }
        assert!(
            files.len() > 50,
            "too few Go files under {}",
            root.display()
        );
        let texts: Vec<String> = files
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect();
        let mut readers = BTreeSet::new();
        for t in &texts {
            reader_args(t, &mut readers);
        }
        for t in &texts {
            go(t, &readers, &mut found);
        }
        found
    }

    /// The list file for `found`, extracted from `version`.
    pub fn render(version: &str, found: &Found) -> String {
        let mut out = format!(
            "# Every setting of the pinned VPC CNI (amazon-vpc-cni-k8s, lab/vpc-cni/go.mod): the README's\n\
             # env headings, the env of config/master/aws-k8s-cni.yaml and of the chart, and the variables\n\
             # the aws-node image's programs read. Generated from the module source (see vpc_cni_names.rs):\n\
             # UPDATE_VPC_CNI_NAMES=1 cargo test -p vpcnet-agent vpc_cni_names_match_the_pinned_source\n\
             # version: {version}\n"
        );
        let width = found.keys().map(String::len).max().unwrap_or(0);
        for (name, sources) in found {
            let sources: Vec<&str> = ["readme", "manifest", "chart", "code"]
                .into_iter()
                .filter(|s| sources.contains(s))
                .collect();
            out.push_str(&format!("{name:width$} {}\n", sources.join(",")));
        }
        out
    }

    /// The pinned version in `lab/vpc-cni/go.mod`.
    pub fn pinned_version() -> String {
        let go_mod = concat!(env!("CARGO_MANIFEST_DIR"), "/../../lab/vpc-cni/go.mod");
        let text = std::fs::read_to_string(go_mod).unwrap();
        text.lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("github.com/aws/amazon-vpc-cni-k8s ")
                    .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
            })
            .expect("lab/vpc-cni/go.mod requires amazon-vpc-cni-k8s")
    }

    /// The module's directory in the Go module cache (`$GOMODCACHE`, else `go env GOMODCACHE`,
    /// else `$HOME/go/pkg/mod`).
    pub fn module_dir(version: &str) -> Option<PathBuf> {
        let cache = std::env::var_os("GOMODCACHE")
            .map(PathBuf::from)
            .or_else(|| {
                let out = std::process::Command::new("go")
                    .args(["env", "GOMODCACHE"])
                    .output()
                    .ok()?;
                let s = String::from_utf8(out.stdout).ok()?;
                (!s.trim().is_empty()).then(|| PathBuf::from(s.trim()))
            })
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join("go/pkg/mod")))?;
        let dir = cache.join(format!("github.com/aws/amazon-vpc-cni-k8s@{version}"));
        dir.join("README.md").is_file().then_some(dir)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::extract::*;
    use super::*;

    #[test]
    fn vpc_cni_names_match_the_pinned_source() {
        let version = pinned_version();
        let dir = module_dir(&version).unwrap_or_else(|| {
            panic!(
                "the pinned VPC CNI source ({version}) is not in the Go module cache; fetch it with \
                 `cd lab/vpc-cni && go mod download github.com/aws/amazon-vpc-cni-k8s` \
                 (scripts/build-k8s.sh does)"
            )
        });
        let want = render(&version, &all(&dir));
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/config/vpc_cni_names.txt");
        if std::env::var_os("UPDATE_VPC_CNI_NAMES").is_some() {
            std::fs::write(path, &want).unwrap();
            return;
        }
        assert!(
            FILE == want,
            "{path} differs from the names in {}; regenerate it with \
             `UPDATE_VPC_CNI_NAMES=1 cargo test -p vpcnet-agent vpc_cni_names_match_the_pinned_source` \
             and declare a status for every new name in config/vpc_cni.rs",
            dir.display()
        );
    }

    #[test]
    fn extraction_finds_each_kind_of_source() {
        let mut f = Found::new();
        readme(
            "## Setup\n#### `NOT_THIS`\n## CNI Configuration Variables<a>\n#### `WARM_IP_TARGET`\n\
             #### `ENABLE_IPv6` (v1.10.0+)\n## Annotations\n#### `NOR_THIS`\n",
            &mut f,
        );
        manifest(
            "kind: ConfigMap\n---\nkind: DaemonSet\nspec:\n  template:\n    spec:\n      \
             initContainers:\n      - name: init\n        env:\n        - name: INIT_VAR\n          \
             value: \"1\"\n      containers:\n      - name: aws-node\n        env:\n        \
             - name: MY_NODE_NAME\n          valueFrom: {}\n      volumes:\n      - name: log_dir\n",
            &mut f,
        );
        chart_values(
            "env:\n  CHART_VAR: \"x\"\ninit:\n  env:\n    INIT_CHART: \"y\"\nimage:\n  tag: v1\n",
            &mut f,
        );
        chart_template(
            "  - name: {{ $key }}\n    value: x\n  - name: MY_POD_NAME\n    valueFrom:\n  - name: cni-bin-dir\n    hostPath:\n",
            &mut f,
        );
        let go_src = "const (\n\tenvFoo = \"FOO_BAR\"\n\tenvVethPrefixDefault = \"eni\"\n\
             \tbindAddress = \"BIND_ADDR\"\n\tother = \"NOT_READ\"\n)\n\
             const envOne = \"ONE_VAR\" // a comment\nvar x = os.Getenv(\"LIT_VAR\")\nclusterNameEnvVar = \"CLUSTER_NAME\"\n\
             notAnEnv := \"NOT_THIS_ONE\"\ny, ok := os.LookupEnv(bindAddress)\n";
        let mut readers = BTreeSet::new();
        reader_args(go_src, &mut readers);
        go(go_src, &readers, &mut f);
        let got: Vec<(&str, Vec<&str>)> = f
            .iter()
            .map(|(k, v)| (k.as_str(), v.iter().copied().collect()))
            .collect();
        assert_eq!(
            got,
            [
                ("BIND_ADDR", vec!["code"]),
                ("CHART_VAR", vec!["chart"]),
                ("CLUSTER_NAME", vec!["code"]),
                ("ENABLE_IPv6", vec!["readme"]),
                ("FOO_BAR", vec!["code"]),
                ("INIT_CHART", vec!["chart"]),
                ("INIT_VAR", vec!["manifest"]),
                ("LIT_VAR", vec!["code"]),
                ("MY_NODE_NAME", vec!["manifest"]),
                ("MY_POD_NAME", vec!["chart"]),
                ("ONE_VAR", vec!["code"]),
                ("WARM_IP_TARGET", vec!["readme"]),
            ]
        );
    }

    #[test]
    fn the_checked_in_list_is_sorted_unique_and_versioned() {
        let all: Vec<&str> = names().collect();
        assert!(all.len() > 40, "{} names", all.len());
        assert!(
            all.windows(2).all(|w| w[0] < w[1]),
            "not sorted or not unique"
        );
        assert_eq!(version(), Some(pinned_version().as_str()));
        for must in [
            "ENABLE_IPv6",
            "WARM_ENI_TARGET",
            "DISABLE_TCP_EARLY_DEMUX",
            "HOST_CNI_BIN_PATH",
        ] {
            assert!(all.contains(&must), "{must}");
        }
    }
}
