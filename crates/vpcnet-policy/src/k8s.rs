//! Conversion from the Kubernetes API objects.
