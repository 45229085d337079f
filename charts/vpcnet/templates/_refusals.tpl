{{/*
Values of the VPC CNI chart that vpcnet does not do, refused with a message naming the key and the
fix (values.schema.json checks types and shapes; its messages cannot say what to do instead).
Rendered first by daemonset.yaml. Each message starts "vpcnet: <key>".
*/}}
{{- define "vpcnet.refusals" -}}
{{- $v := .Values -}}
{{- $ecr := "vpcnet's images are not in EKS's ECR accounts, so the chart builds no ECR reference" -}}
{{- range $block := list "image" "init.image" -}}
{{- $img := ternary $v.image $v.init.image (eq $block "image") -}}
{{- range $key := list "account" "region" "domain" "endpoint" -}}
{{- if hasKey $img $key -}}
{{- fail (printf "vpcnet: %s.%s is not supported: %s; remove it and set %s.override (the whole reference, e.g. 111122223333.dkr.ecr.us-west-2.amazonaws.com/vpcnet/vpcnet-node:0.1.0) or %s.overrideRepository (the repository; the tag stays %s.tag)" $block $key $ecr $block $block $block) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $v.init.image.tag $v.image.override (not $v.init.image.override) (not $v.init.image.overrideRepository) -}}
{{- fail "vpcnet: init.image.tag is not supported with image.override: the init image's repository is not known then; set init.image.override (or init.image.overrideRepository), or remove init.image.tag to run the agent's image" -}}
{{- end -}}
{{- with $v.nodeAgent -}}
{{- range $key, $_ := . -}}
{{- if not (has $key (list "enabled" "enablePolicyEventLogs" "enableCloudWatchLogs")) -}}
{{- fail (printf "vpcnet: nodeAgent.%s is not supported: vpcnet enforces network policy in its own agent (no aws-eks-nodeagent container), so it would configure nothing; remove nodeAgent.%s (nodeAgent.enabled, nodeAgent.enablePolicyEventLogs and enableNetworkPolicy are what vpcnet reads; to keep the AWS node agent instead, run it in a DaemonSet of its own and set env.VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent, see docs/network-policy.md)" $key $key) -}}
{{- end -}}
{{- end -}}
{{- if hasKey . "enablePolicyEventLogs" -}}
{{- if not (has (toString .enablePolicyEventLogs) (list "true" "false")) -}}
{{- fail (printf "vpcnet: nodeAgent.enablePolicyEventLogs=%v is not valid: set it to \"true\" (log policy verdicts to /var/log/aws-routed-eni/network-policy-agent.log on each node) or \"false\"" .enablePolicyEventLogs) -}}
{{- end -}}
{{- end -}}
{{- if and (hasKey . "enableCloudWatchLogs") (ne (toString .enableCloudWatchLogs) "false") -}}
{{- fail (printf "vpcnet: nodeAgent.enableCloudWatchLogs=%v is not supported: vpcnet writes policy event logs only to each node's /var/log/aws-routed-eni/network-policy-agent.log, not to CloudWatch Logs; remove it or set it to \"false\", and ship that file with a log agent (e.g. the CloudWatch agent or Fluent Bit) if you need them in CloudWatch" .enableCloudWatchLogs) -}}
{{- end -}}
{{- end -}}
{{- if and (eq (toString (dig "enablePolicyEventLogs" "false" (default dict $v.nodeAgent))) "true") (not (include "vpcnet.networkPolicy" .)) -}}
{{- fail "vpcnet: nodeAgent.enablePolicyEventLogs=true needs network policy enforcement: policy event logs report its verdicts, and enableNetworkPolicy is not true (or nodeAgent.enabled is false); set enableNetworkPolicy=true, or remove nodeAgent.enablePolicyEventLogs" -}}
{{- end -}}
{{- if hasKey $v.env "VPCNET_POLICY_EVENT_LOGS" -}}
{{- fail "vpcnet: env.VPCNET_POLICY_EVENT_LOGS is not supported: the chart sets it from nodeAgent.enablePolicyEventLogs; remove it from env and set nodeAgent.enablePolicyEventLogs" -}}
{{- end -}}
{{- if not (has (toString $v.enableNetworkPolicy) (list "true" "false")) -}}
{{- fail (printf "vpcnet: enableNetworkPolicy=%v is not valid: set it to \"true\" (enforce NetworkPolicy on the nodes) or \"false\"" $v.enableNetworkPolicy) -}}
{{- end -}}
{{- if and (eq (toString (index $v.env "VPCNET_NETWORK_POLICY_AGENT" | default "")) "aws-eks-nodeagent") (include "vpcnet.networkPolicy" .) -}}
{{- fail "vpcnet: env.VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent is not supported with enableNetworkPolicy=true: the AWS node agent enforces NetworkPolicy then, and vpcnet's own enforcement beside it would drop what the node agent allows; set enableNetworkPolicy=false (the node agent runs in a DaemonSet of its own, see docs/network-policy.md), or remove env.VPCNET_NETWORK_POLICY_AGENT to have vpcnet enforce" -}}
{{- end -}}
{{- if hasKey $v.env "VPCNET_ENABLE_NETWORK_POLICY" -}}
{{- fail "vpcnet: env.VPCNET_ENABLE_NETWORK_POLICY is not supported: the chart sets it from enableNetworkPolicy, together with the RBAC the agent's watches need; remove it from env and set enableNetworkPolicy" -}}
{{- end -}}
{{- range $key, $default := dict "enableWindowsIpam" "false" "enableWindowsPrefixDelegation" "false" "warmWindowsPrefixTarget" "0" "warmWindowsIPTarget" "1" "minimumWindowsIPTarget" "3" -}}
{{- if ne (toString (index $v $key)) $default -}}
{{- fail (printf "vpcnet: %s=%v is not supported: vpcnet has no Windows nodes' IPAM (the VPC CNI chart's amazon-vpc-cni ConfigMap, read by the VPC resource controller); remove it or set it to %s" $key (index $v $key) $default) -}}
{{- end -}}
{{- end -}}
{{- if ne (toString $v.branchENICooldown) "60" -}}
{{- fail (printf "vpcnet: branchENICooldown=%v is not supported: vpcnet has no security groups for pods (branch ENIs; ENABLE_POD_ENI is refused too); remove it or set it to 60" $v.branchENICooldown) -}}
{{- end -}}
{{- if $v.cniConfig.enabled -}}
{{- fail "vpcnet: cniConfig.enabled=true is not supported: vpcnet-agent writes its own conflist (/etc/cni/net.d/10-vpcnet.conflist) once it can serve, from its settings, and takes no custom one; remove cniConfig and set the conflist's contents through env (AWS_VPC_ENI_MTU, POD_MTU, AWS_VPC_K8S_CNI_VETHPREFIX, ENABLE_BANDWIDTH_PLUGIN, DISABLE_POD_V6, the plugin log settings)" -}}
{{- end -}}
{{- if $v.cniConfig.fileContents -}}
{{- fail "vpcnet: cniConfig.fileContents is not supported: vpcnet-agent writes its own conflist and takes no custom one; remove it (see cniConfig.enabled)" -}}
{{- end -}}
{{- if hasKey $v.env "MY_NODE_NAME" -}}
{{- fail "vpcnet: env.MY_NODE_NAME is not supported: the chart sets it from the pod's spec.nodeName (the downward API); remove it" -}}
{{- end -}}
{{- if has (toString (index $v.env "DISABLE_INTROSPECTION" | default "false")) (list "1" "t" "T" "TRUE" "true" "True") -}}
{{- fail "vpcnet: env.DISABLE_INTROSPECTION=true is not supported by the chart: the liveness and readiness probes run `vpcnet inspect health` against the agent's introspection endpoint (127.0.0.1:61679 by default, INTROSPECTION_BIND_ADDRESS); remove it or set it to \"false\"" -}}
{{- end -}}
{{- $hostBin := index $v.init.env "HOST_CNI_BIN_PATH" | default "/host/opt/cni/bin" -}}
{{- if ne $hostBin "/host/opt/cni/bin" -}}
{{- fail (printf "vpcnet: init.env.HOST_CNI_BIN_PATH=%s is not supported: the chart mounts the host's /opt/cni/bin at /host/opt/cni/bin, where vpcnet-init installs the plugins; remove it" $hostBin) -}}
{{- end -}}
{{- $true := list "1" "t" "T" "TRUE" "true" "True" -}}
{{- range $key := list "DISABLE_POD_V6" "ENABLE_BANDWIDTH_PLUGIN" -}}
{{- if and (hasKey $v.env $key) (hasKey $v.init.env $key) -}}
{{- if ne (has (toString (index $v.env $key)) $true) (has (toString (index $v.init.env $key)) $true) -}}
{{- fail (printf "vpcnet: init.env.%s=%v differs from env.%s=%v: the agent's conflist chains the plugins vpcnet-init installs, so they must agree; remove init.env.%s (the chart passes env's value to the init container)" $key (index $v.init.env $key) $key (index $v.env $key) $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $name := list "livenessProbe" "readinessProbe" -}}
{{- $probe := index $v $name -}}
{{- if and $probe.exec $probe.exec.command (contains "grpc-health-probe" (index $probe.exec.command 0)) -}}
{{- fail (printf "vpcnet: %s.exec.command runs %s, which the vpcnet image does not have (the VPC CNI's health probe); remove %s.exec to use the chart's `vpcnet inspect health`" $name (index $probe.exec.command 0) $name) -}}
{{- end -}}
{{- end -}}
{{- if and (hasKey $v.securityContext "privileged") (not $v.securityContext.privileged) -}}
{{- fail "vpcnet: securityContext.privileged=false is not supported: the agent writes the host's /proc/sys/net (rp_filter, forwarding), which container runtimes mount read-only in unprivileged containers, so it would fail at start; remove it (docs/chart.md, \"Security context\")" -}}
{{- end -}}
{{- end -}}
