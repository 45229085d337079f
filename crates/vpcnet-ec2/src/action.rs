//! The EC2 actions vpcnet calls, and their request-token class.

use std::fmt;

pub use vpcnet_aws::ActionClass;

/// One EC2 API action (the `Action=` parameter of the EC2 Query API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    DescribeInstances,
    DescribeInstanceTypes,
    DescribeSubnets,
    DescribeNetworkInterfaces,
    CreateNetworkInterface,
    AttachNetworkInterface,
    ModifyNetworkInterfaceAttribute,
    DetachNetworkInterface,
    DeleteNetworkInterface,
    AssignPrivateIpAddresses,
    UnassignPrivateIpAddresses,
    CreateTags,
}

impl Action {
    /// Every action, in declaration order.
    pub const ALL: [Action; 12] = [
        Action::DescribeInstances,
        Action::DescribeInstanceTypes,
        Action::DescribeSubnets,
        Action::DescribeNetworkInterfaces,
        Action::CreateNetworkInterface,
        Action::AttachNetworkInterface,
        Action::ModifyNetworkInterfaceAttribute,
        Action::DetachNetworkInterface,
        Action::DeleteNetworkInterface,
        Action::AssignPrivateIpAddresses,
        Action::UnassignPrivateIpAddresses,
        Action::CreateTags,
    ];

    /// The EC2 action name, e.g. `"AssignPrivateIpAddresses"` (used as a metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::DescribeInstances => "DescribeInstances",
            Action::DescribeInstanceTypes => "DescribeInstanceTypes",
            Action::DescribeSubnets => "DescribeSubnets",
            Action::DescribeNetworkInterfaces => "DescribeNetworkInterfaces",
            Action::CreateNetworkInterface => "CreateNetworkInterface",
            Action::AttachNetworkInterface => "AttachNetworkInterface",
            Action::ModifyNetworkInterfaceAttribute => "ModifyNetworkInterfaceAttribute",
            Action::DetachNetworkInterface => "DetachNetworkInterface",
            Action::DeleteNetworkInterface => "DeleteNetworkInterface",
            Action::AssignPrivateIpAddresses => "AssignPrivateIpAddresses",
            Action::UnassignPrivateIpAddresses => "UnassignPrivateIpAddresses",
            Action::CreateTags => "CreateTags",
        }
    }

    /// The token bucket this action draws from.
    pub fn class(self) -> ActionClass {
        match self {
            Action::DescribeInstances
            | Action::DescribeInstanceTypes
            | Action::DescribeSubnets
            | Action::DescribeNetworkInterfaces => ActionClass::Describe,
            _ => ActionClass::Mutating,
        }
    }

    /// Whether the action changes EC2 state.
    pub fn is_mutating(self) -> bool {
        self.class() == ActionClass::Mutating
    }
}

impl vpcnet_aws::AwsAction for Action {
    fn class(self) -> ActionClass {
        Action::class(self)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_actions_are_the_describe_class() {
        for a in Action::ALL {
            assert_eq!(
                a.as_str().starts_with("Describe"),
                a.class() == ActionClass::Describe,
                "{a}"
            );
            assert_eq!(a.is_mutating(), !a.as_str().starts_with("Describe"));
        }
    }
}
