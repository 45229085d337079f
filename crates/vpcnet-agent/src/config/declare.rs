//! `settings!`: declares a configuration struct whose every field is one environment
//! variable, written once as
//!
//! ```text
//! /// Meaning (rustdoc of the field and the "meaning" column of docs/configuration.md).
//! field: Type = "VARIABLE", "default text", kind;
//! ```
//!
//! under a `["section"]` header (the id of its table in docs/configuration.md). From that one
//! line come the struct field, its parsing (`read`, every invalid variable reported), its value
//! in `/v1/env-settings` (`show`) and its docs/configuration.md row (`declarations`). `kind` is a
//! [`Kind`](super::kinds::Kind); the default text is what an unset or empty variable means
//! (empty: unset). `@group field: Type;` lines at the end nest another `settings!` struct.

use super::kinds::Kind;
use super::InvalidSetting;

/// One declared setting, as documented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    /// The environment variable.
    pub var: &'static str,
    /// The text an unset or empty variable means; empty: unset.
    pub default: &'static str,
    /// Its table in docs/configuration.md (`<!-- settings:SECTION -->`).
    pub section: &'static str,
    /// Meaning, from the field's doc comment.
    pub doc: &'static str,
    /// What the variable accepts.
    pub accepted: String,
}

/// The value of `var` (trimmed; empty or unset means `default`) as `kind` reads it.
pub fn read<K: Kind>(
    get: &dyn Fn(&str) -> Option<String>,
    var: &'static str,
    default: &'static str,
    kind: &K,
) -> Result<K::Value, InvalidSetting> {
    let given = get(var).map(|v| v.trim().to_string()).unwrap_or_default();
    let text = if given.is_empty() { default } else { &given };
    kind.parse(text).map_err(|problem| InvalidSetting {
        var,
        value: text.to_string(),
        problem,
        accepted: kind.accepted(),
        refused: false,
    })
}

/// What a setting of type `V` accepts, for docs/configuration.md (naming `V` picks the kind's
/// type).
pub fn summary<V, K: Kind<Value = V>>(kind: &K) -> String {
    kind.summary()
}

macro_rules! settings {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                [$section:literal]
                $(
                    $(#[doc = $doc:literal])*
                    $field:ident: $ty:ty = $var:literal, $default:literal, $kind:expr;
                )*
            )*
            $( @group $gfield:ident: $gty:ty; )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $($(
                #[doc = concat!("`", $var, "` (default \"", $default, "\"):")]
                $(#[doc = $doc])*
                pub $field: $ty,
            )*)*
            $( pub $gfield: $gty, )*
        }

        impl $name {
            /// Every setting of the struct and its groups, in declaration order.
            pub fn declarations() -> Vec<$crate::config::declare::Declaration> {
                #[allow(unused_mut)]
                let mut all = vec![$($(
                    $crate::config::declare::Declaration {
                        var: $var,
                        default: $default,
                        section: $section,
                        doc: concat!($($doc, "\n"),*),
                        accepted: $crate::config::declare::summary::<$ty, _>(&$kind),
                    },
                )*)*];
                $( all.extend(<$gty>::declarations()); )*
                all
            }

            /// Reads every variable; all invalid ones are reported, in declaration order.
            fn read(
                get: &dyn Fn(&str) -> Option<String>,
            ) -> Result<Self, Vec<$crate::config::InvalidSetting>> {
                $($( let $field = $crate::config::declare::read(get, $var, $default, &$kind); )*)*
                $( let $gfield = <$gty>::read(get); )*
                match ($($($field,)*)* $($gfield,)*) {
                    ($($(Ok($field),)*)* $(Ok($gfield),)*) => Ok($name {
                        $($($field,)*)*
                        $($gfield,)*
                    }),
                    ($($($field,)*)* $($gfield,)*) => {
                        #[allow(unused_mut)]
                        let mut invalid: Vec<_> = [$($($field.err(),)*)*]
                            .into_iter()
                            .flatten()
                            .collect();
                        $( invalid.extend($gfield.err().into_iter().flatten()); )*
                        Err(invalid)
                    }
                }
            }

            /// Adds every variable's effective value (as [`Self::read`] reads it back).
            fn show(&self, out: &mut std::collections::BTreeMap<&'static str, String>) {
                $($( out.insert($var, $crate::config::kinds::Kind::show(&$kind, &self.$field)); )*)*
                $( self.$gfield.show(out); )*
            }
        }
    };
}

pub(crate) use settings;
