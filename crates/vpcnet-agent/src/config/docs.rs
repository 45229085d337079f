//! What `docs/configuration.md` and `vpcnet-agent --help` show of the declared settings.

use std::collections::BTreeMap;

use super::{vpc_cni, Config};

impl Config {
    /// The tables of `docs/configuration.md`, by section id.
    pub fn doc_tables() -> BTreeMap<&'static str, String> {
        let rows = Config::declarations().into_iter().map(|d| {
            let default = if d.default.is_empty() {
                "unset".to_string()
            } else {
                format!("`{}`", d.default)
            };
            let cells = vec![
                format!("`{}`", d.var),
                default,
                d.accepted,
                crate::docs::one_line(d.doc),
            ];
            (d.section, cells)
        });
        let mut tables = crate::docs::tables(&["variable", "default", "accepts", "meaning"], rows);
        tables.insert("vpc-cni", vpc_cni_status_table());
        tables
    }

    /// The variables and their defaults, grouped as in docs/configuration.md: the list
    /// `vpcnet-agent --help` prints.
    pub fn variables_help() -> String {
        let decls = Config::declarations();
        let mut sections: Vec<&'static str> = Vec::new();
        for d in &decls {
            if !sections.contains(&d.section) {
                sections.push(d.section);
            }
        }
        let width = decls.iter().map(|d| d.var.len()).max().unwrap_or(0);
        let mut out = String::new();
        for section in sections {
            let title = match section {
                "warm-pool" => "Warm pool",
                "custom-networking" => "Custom networking",
                "datapath" => "Datapath",
                "network-policy" => "Network policy",
                "cluster" => "Cluster and ENIs",
                "endpoints" => "Endpoints and files",
                "ec2" => "EC2",
                other => other,
            };
            out.push_str(&format!("  {title}:\n"));
            for d in decls.iter().filter(|d| d.section == section) {
                let default = if d.default.is_empty() {
                    "(unset)"
                } else {
                    d.default
                };
                out.push_str(&format!("    {:width$}  {default}\n", d.var));
            }
        }
        out
    }
}

/// The docs/configuration.md table of every VPC CNI setting and its status in vpcnet.
fn vpc_cni_status_table() -> String {
    vpc_cni::status_table(&Config::declarations())
}
