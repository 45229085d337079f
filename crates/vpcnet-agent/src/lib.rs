//! Node agent (the VPC CNI's ipamd): warm pool, EC2 adapter use, checkpoint, gRPC for the plugin, introspection, metrics
