//! Pod and node datapath over netlink: veth, addresses, routes, policy rules, neighbours, ENI route tables
