//! Lab and test cloud: EC2 Query API, IMDSv2 (and later ELBv2, Kubernetes) with EC2's limits, errors and faults
