var e=[{kind:`BGPInstanceConfig`,key:`bgpInstanceConfig`,since:`v1.14`,schema:{type:`object`,props:{advertise:{type:`array`,doc:`Names or aliases of the links whose addresses are originated into BGP as connected networks using their configured prefix lengths.`,items:{type:`string`}},importRoutes:{type:`array`,doc:`Selected routes to import from other BGP instances. Imports are one-way: matching best paths
learned from each source instance are preserved and advertised by this instance with its own
next hop. Locally originated and previously imported paths are not recursively imported.
Selectors in a single target instance must not overlap, giving each imported prefix one source.`,items:{type:`object`,props:{bgpInstance:{type:`string`,doc:`Name of the source BGP instance.`},prefixes:{type:`array`,doc:`CIDR selectors. A learned route matches when it is contained by one of these prefixes.

An IP prefix in CIDR notation.`,items:{type:`string`}}}}},installRoutes:{type:`boolean`,doc:`Install routes learned from BGP neighbors into the Linux routing table. Defaults to true.
When false, learned routes remain in this instance's BGP RIB and can still be selected by
\`importRoutes\`, but Talos does not install them into the Linux FIB.`},localASN:{type:`integer`,doc:`Local autonomous system number for the BGP instance.`,format:`int64`,min:0,max:4294967295},maxPaths:{type:`integer`,doc:`Maximum number of ECMP next-hops to install. Zero uses the implementation default.`,min:0,max:255},multipath:{type:`boolean`,doc:`Enable ECMP (multipath) for routes learned from multiple neighbors. Defaults to false.`},name:{type:`string`,doc:`Name of the BGP routing instance.`},neighbors:{type:`array`,doc:`BGP neighbors in this routing instance.`,items:{type:`object`,props:{address:{type:`string`,doc:`Neighbor IP address for a numbered session. Mutually exclusive with \`link\`.

An IP address.`},bfd:{type:`object`,doc:`BFD (Bidirectional Forwarding Detection) settings for this neighbor.
The presence of this block enables BFD; an empty block uses the implementation defaults.
BFD is supported only when the BGP instance uses the default routing domain, not a VRF.`,props:{detectMultiplier:{type:`integer`,doc:`BFD detection multiplier. Zero uses the implementation default.`,min:0,max:255},receiveInterval:{type:`string`,doc:`Required minimum receive interval. Zero uses the implementation default.

A duration such as 30s or 1h5m.`},transmitInterval:{type:`string`,doc:`Desired minimum transmit interval. Zero uses the implementation default.

A duration such as 30s or 1h5m.`}}},holdTime:{type:`string`,doc:`BGP hold time for this neighbor. Zero uses the implementation default.

A duration such as 30s or 1h5m.`},link:{type:`string`,doc:"Link name or alias for an unnumbered (IPv6 link-local) session. Mutually exclusive with `address`."},localASN:{type:`integer`,doc:`Local ASN override for this neighbor. Zero uses the instance local ASN.`,format:`int64`,min:0,max:4294967295},passive:{type:`boolean`,doc:`Wait for the neighbor to establish the connection instead of initiating it.`},peerASN:{type:`integer`,doc:`Expected peer ASN. Zero accepts any ASN advertised by the peer (eBGP "external").`,format:`int64`,min:0,max:4294967295}}}},routeSource:{type:`string`,doc:"Preferred source address set on routes installed from BGP (the kernel route `src` / RTA_PREFSRC,\nequivalent to FRR's `ip protocol bgp route-map SETSRC`). If not set, the kernel selects the source address.\n\nAn IP address."},routerID:{type:`string`,doc:`BGP router-id. If not set, it is derived from the first advertised address.

An IP address.`},vrf:{type:`string`,doc:`Linux VRF link used by this routing instance. If unset, the default routing domain is used.`}},class:`NoReboot`}},{kind:`BlackholeRouteConfig`,key:`blackholeRouteConfig`,since:`v1.13`,schema:{type:`object`,props:{metric:{type:`integer`,doc:`The optional metric for the route.`,format:`int64`,min:0,max:4294967295},name:{type:`string`,doc:`Route destination as an address prefix.`}},class:`NoReboot`}},{kind:`BondConfig`,key:`bondConfig`,since:`v1.12`,schema:{type:`object`,props:{adActorSysPrio:{type:`integer`,doc:`Actor system priority for 802.3ad.`,min:0,max:65535},adLACPActive:{type:`string`,doc:`Whether to send LACPDU frames periodically, defaults to "on" if mode is 802.3ad.

The value is Talos's textual form of ADLACPActive.`,enum:[`on`,`off`]},adSelect:{type:`string`,doc:`Aggregate selection policy for 802.3ad.

The value is Talos's textual form of ADSelect.`,enum:[`stable`,`bandwidth`,`count`]},adUserPortKey:{type:`integer`,doc:`User port key (upper 10 bits) for 802.3ad.`,min:0,max:65535},addresses:{type:`array`,doc:`Configure addresses to be statically assigned to the link.`,items:{type:`object`,props:{address:{type:`string`,doc:`IP address to be assigned to the link.

This field must include the network prefix length (e.g. /24 for IPv4, /64 for IPv6).

An IP prefix in CIDR notation.`},routePriority:{type:`integer`,doc:`Configure the route priority (metric) for routes created for this address.

If not specified, the system default route priority will be used.`,format:`int64`,min:0,max:4294967295}}}},allSlavesActive:{type:`integer`,doc:`Whether duplicate frames (received on inactive ports) should be dropped (0) or delivered (1).`,min:0,max:255},arpAllTargets:{type:`string`,doc:`Specifies whether ARP probes should be sent to any or all targets.

The value is Talos's textual form of ARPAllTargets.`,enum:[`any`,`all`]},arpInterval:{type:`integer`,doc:`ARP link monitoring frequency in milliseconds.`,format:`int64`,min:0,max:4294967295},arpIpTargets:{type:`array`,doc:`The list of IPv4 addresses to use for ARP link monitoring when arpInterval is set.
Maximum of 16 targets are supported.

An IP address.`,items:{type:`string`}},arpValidate:{type:`string`,doc:`Specifies whether or not ARP probes and replies should be validated.

The value is Talos's textual form of ARPValidate.`,enum:[`none`,`active`,`backup`,`all`,`filter`,`filter-active`,`filter-backup`]},bondMode:{type:`string`,doc:`Bond mode.

The value is Talos's textual form of BondMode.`,enum:[`balance-rr`,`active-backup`,`balance-xor`,`broadcast`,`802.3ad`,`balance-tlb`,`balance-alb`]},downdelay:{type:`integer`,doc:`The time, in milliseconds, to wait before disabling a slave after a link failure has been detected.`,format:`int64`,min:0,max:4294967295},failOverMac:{type:`string`,doc:`Specifies whether active-backup mode should set all slaves to the same MAC address
at enslavement, when enabled, or perform special handling.

The value is Talos's textual form of FailOverMAC.`,enum:[`none`,`active`,`follow`]},hardwareAddr:{type:`string`,doc:`Override the hardware (MAC) address of the link.

The value is Talos's textual form of HardwareAddr.`},lacpRate:{type:`string`,doc:`LACPDU frames periodic transmission rate.

The value is Talos's textual form of LACPRate.`,enum:[`slow`,`fast`]},links:{type:`array`,doc:`Names of the links (interfaces) on which the bond will be created.
Link aliases can be used here as well.`,items:{type:`string`}},lpInterval:{type:`integer`,doc:`The number of seconds between instances where the bonding driver sends learning packets to each slave's peer switch.`,format:`int64`,min:0,max:4294967295},miimon:{type:`integer`,doc:`Link monitoring frequency in milliseconds.`,format:`int64`,min:0,max:4294967295},minLinks:{type:`integer`,doc:`The minimum number of active links required for the bond to be considered active.`,format:`int64`,min:0,max:4294967295},missedMax:{type:`integer`,doc:`The number of arpInterval monitor checks that must fail in order for an interface to be marked down by the ARP monitor.`,min:0,max:255},mtu:{type:`integer`,doc:`Configure LinkMTU (Maximum Transmission Unit) for the link.

If not specified, the system default LinkMTU will be used (usually 1500).`,format:`int64`,min:0,max:4294967295},multicast:{type:`boolean`,doc:`Set the multicast capability of the link.`},name:{type:`string`,doc:`Name of the bond link (interface) to be created.`},nsIp6Targets:{type:`array`,doc:`The list of IPv6 addresses to use for NS link monitoring when arpInterval is set.
Maximum of 16 targets are supported.

An IP address.`,items:{type:`string`}},numPeerNotif:{type:`integer`,doc:`The number of peer notifications (gratuitous ARPs and unsolicited IPv6 Neighbor Advertisements)
to be issued after a failover event.`,min:0,max:255},packetsPerSlave:{type:`integer`,doc:`The number of packets to transmit through a slave before moving to the next one.`,format:`int64`,min:0,max:4294967295},peerNotifDelay:{type:`integer`,doc:`The delay, in milliseconds, between each peer notification.`,format:`int64`,min:0,max:4294967295},primaryReselect:{type:`string`,doc:`Policy under which the primary slave should be reselected.

The value is Talos's textual form of PrimaryReselect.`,enum:[`always`,`better`,`failure`]},resendIGMP:{type:`integer`,doc:`The number of times IGMP packets should be resent.`,format:`int64`,min:0,max:4294967295},routes:{type:`array`,doc:`Configure routes to be statically created via the link.`,items:{type:`object`,props:{destination:{type:`string`,doc:`The route's destination as an address prefix.

If not specified, a default route will be created for the address family of the gateway.

An IP prefix in CIDR notation.`},gateway:{type:`string`,doc:`The route's gateway (if empty, creates link scope route).

An IP address.`},metric:{type:`integer`,doc:`The optional metric for the route.`,format:`int64`,min:0,max:4294967295},mtu:{type:`integer`,doc:`The optional MTU for the route.`,format:`int64`,min:0,max:4294967295},source:{type:`string`,doc:`The route's source address (optional).

An IP address.`},table:{type:`string`,doc:`The routing table to use for the route.

If not specified, the main routing table will be used.

The value is Talos's textual form of RoutingTable.`}}}},tlbLogicalLb:{type:`integer`,doc:`Whether dynamic shuffling of flows is enabled in tlb or alb mode.`,min:0,max:255},up:{type:`boolean`,doc:`Bring the link up or down.

If not specified, the link will be brought up.`},updelay:{type:`integer`,doc:`The time, in milliseconds, to wait before enabling a slave after a link recovery has been detected.`,format:`int64`,min:0,max:4294967295},useCarrier:{type:`boolean`,doc:`Specifies whether or not miimon should use MII or ETHTOOL.`},xmitHashPolicy:{type:`string`,doc:`Selects the transmit hash policy to use for slave selection.

The value is Talos's textual form of BondXmitHashPolicy.`,enum:[`layer2`,`layer3+4`,`layer2+3`,`encap2+3`,`encap3+4`]}},class:`NoReboot`}},{kind:`BridgeConfig`,key:`bridgeConfig`,since:`v1.12`,schema:{type:`object`,props:{addresses:{type:`array`,doc:`Configure addresses to be statically assigned to the link.`,items:{type:`object`,props:{address:{type:`string`,doc:`IP address to be assigned to the link.

This field must include the network prefix length (e.g. /24 for IPv4, /64 for IPv6).

An IP prefix in CIDR notation.`},routePriority:{type:`integer`,doc:`Configure the route priority (metric) for routes created for this address.

If not specified, the system default route priority will be used.`,format:`int64`,min:0,max:4294967295}}}},hardwareAddr:{type:`string`,doc:`Override the hardware (MAC) address of the link.

The value is Talos's textual form of HardwareAddr.`},links:{type:`array`,doc:`Names of the links (interfaces) to be aggregated.
Link aliases can be used here as well.`,items:{type:`string`}},mtu:{type:`integer`,doc:`Configure LinkMTU (Maximum Transmission Unit) for the link.

If not specified, the system default LinkMTU will be used (usually 1500).`,format:`int64`,min:0,max:4294967295},multicast:{type:`boolean`,doc:`Set the multicast capability of the link.`},name:{type:`string`,doc:`Name of the bridge link (interface) to be created.`},routes:{type:`array`,doc:`Configure routes to be statically created via the link.`,items:{type:`object`,props:{destination:{type:`string`,doc:`The route's destination as an address prefix.

If not specified, a default route will be created for the address family of the gateway.

An IP prefix in CIDR notation.`},gateway:{type:`string`,doc:`The route's gateway (if empty, creates link scope route).

An IP address.`},metric:{type:`integer`,doc:`The optional metric for the route.`,format:`int64`,min:0,max:4294967295},mtu:{type:`integer`,doc:`The optional MTU for the route.`,format:`int64`,min:0,max:4294967295},source:{type:`string`,doc:`The route's source address (optional).

An IP address.`},table:{type:`string`,doc:`The routing table to use for the route.

If not specified, the main routing table will be used.

The value is Talos's textual form of RoutingTable.`}}}},stp:{type:`object`,doc:`Bridge STP (Spanning Tree Protocol) configuration.`,props:{enabled:{type:`boolean`,doc:`Enable or disable STP on the bridge.`}}},up:{type:`boolean`,doc:`Bring the link up or down.

If not specified, the link will be brought up.`},vlan:{type:`object`,doc:`Bridge VLAN configuration.`,props:{filtering:{type:`boolean`,doc:`Enable or disable VLAN filtering on the bridge.`}}}},class:`NoReboot`}},{kind:`CRICustomizationConfig`,key:`criCustomizationConfig`,since:`v1.14`,schema:{type:`object`,props:{content:{type:`string`,doc:`CRI containerd configuration fragment in TOML format.`},name:{type:`string`,doc:`Name of the CRI customization.

Customizations are merged with physical CRI configuration parts in
lexicographical order by name. The legacy
\`/etc/cri/conf.d/20-customization.part\` machine file is included under
the reserved name \`customization\`.

Applying, updating, or removing a customization restarts CRI automatically.`}},class:`NoReboot`}},{kind:`ContainerConfig`,key:`containerConfig`,since:`v1.14`,schema:{type:`object`,props:{args:{type:`array`,doc:`Overrides the image's CMD.`,items:{type:`string`}},dependsOn:{type:`object`,doc:`Conditions which must be satisfied before the container is started.`,props:{containers:{type:`array`,doc:`Other containers, by document name, which must be running first.

Cycles are rejected when the machine configuration is applied.`,items:{type:`string`}},networks:{type:`array`,doc:`Network readiness conditions which must be satisfied.`,items:{type:`string`,enum:[`addresses`,`connectivity`,`hostname`,`etcfiles`]}},paths:{type:`array`,doc:`Host paths which must exist before the container starts.

Polled, so a path that never appears leaves the container waiting indefinitely.`,items:{type:`string`}},time:{type:`boolean`,doc:`Whether the clock must be synchronized before the container starts.`}}},entrypoint:{type:`array`,doc:`Overrides the image's ENTRYPOINT.

Unset means the image's own entrypoint is used.`,items:{type:`string`}},environment:{type:`array`,doc:`Environment variables, in \`KEY=value\` form, merged over the image's own ENV.

Values are stored in the machine configuration verbatim, so treat anything put here
as being as sensitive as the machine configuration itself.`,items:{type:`string`}},image:{type:`string`,doc:"OCI image reference supplying the container's root filesystem.\n\nA digest-pinned reference (`repo@sha256:...`) is recommended: it is the only form\nthat guarantees the same bytes on every pull. Short references are accepted and\nnormalized, so `nginx` becomes `index.docker.io/library/nginx:latest`."},mounts:{type:`array`,doc:`Filesystems to mount into the container.`,items:{type:`object`,props:{hostPath:{type:`object`,doc:`Bind-mount a path from the host.

The source must already exist; Talos will not create it. This is the widest of the
three sources and the only one that can reach arbitrary host state.`,props:{destination:{type:`string`,doc:`Absolute path inside the container's mount namespace.`},options:{type:`array`,doc:"Mount options. Host path mounts are writable by default (`rw`).",items:{type:`string`}},source:{type:`string`,doc:`Absolute path on the host. Must already exist.`}}},tmpfs:{type:`object`,doc:`Mount a tmpfs for scratch space.`,props:{destination:{type:`string`,doc:`Absolute path inside the container's mount namespace.`},options:{type:`array`,doc:"Mount options. Tmpfs mounts are writable by default (`rw`).",items:{type:`string`}},size:{type:`string`,doc:"Size of the tmpfs, e.g. `64MiB`. Empty means the kernel default."}}},userVolume:{type:`object`,doc:"Mount a user volume, referenced by the name of its `UserVolumeConfig` document.\n\nThe volume is mounted from `/var/mnt/<name>` on the host. Declaring this mount also\nmakes the container wait for the volume to be mounted before it starts.",props:{destination:{type:`string`,doc:`Absolute path inside the container's mount namespace.`},name:{type:`string`,doc:"Name of the `UserVolumeConfig` document to mount."},options:{type:`array`,doc:"Mount options. User volume mounts are writable by default (`rw`).",items:{type:`string`,enum:[`ro`,`rw`,`noexec`,`nosuid`,`nodev`,`noatime`,`rbind`,`rshared`]}}}}}}},name:{type:`string`,doc:`Name of the container.

Must be between 1 and 63 characters long, and can only contain lowercase ASCII
letters, digits and hyphens. It is used as the containerd container ID and as the
container's log identifier, so it may not collide with a Talos service name.`},network:{type:`object`,doc:`Network settings for the container.`,props:{mode:{type:`string`,doc:`Network mode.

\`none\` gives the container its own empty network namespace with no host access.
\`host\` shares the host network namespace, so the container sees every interface and
can bind any port.`,enum:[`none`,`host`]}}},resources:{type:`object`,doc:`Resource limits, applied as cgroup v2 settings.`,props:{limits:{type:`object`,doc:`Hard ceilings the container cannot exceed.`,props:{cpu:{type:`string`,doc:"CPU ceiling in millicores, mapped onto cgroup v2 `cpu.max`.\n\n`1000m` is one core."},memory:{type:`string`,doc:`Memory ceiling, mapped onto cgroup v2 \`memory.max\`.

Exceeding it OOM-kills the container.`}}}}},runAs:{type:`object`,doc:`Overrides the image's USER uid and/or gid.

There are no user namespaces, so a container running as uid 0 is root on the host.`,props:{gid:{type:`integer`,doc:`GID to run the container's entrypoint as.

Unset means use the image's own USER.`,format:`int32`},uid:{type:`integer`,doc:`UID to run the container's entrypoint as.

Unset means use the image's own USER. There are no user namespaces, so uid 0 is host
root.`,format:`int32`}}},security:{type:`object`,doc:`Security settings for the container.`,props:{capabilities:{type:`object`,doc:`Linux capabilities to add or drop on top of the profile.`,props:{add:{type:`array`,doc:"Capabilities to grant, without the `CAP_` prefix.",items:{type:`string`}},drop:{type:`array`,doc:"Capabilities to remove, without the `CAP_` prefix. `ALL` removes every capability.",items:{type:`string`}}}},machinedAccess:{type:`boolean`,doc:`Publishes the container's PID so machined's API can recognize it, and bind-mounts the
machined API socket into the container.

This alone does not grant DAC access to the socket, which is owned by the \`apid\` user:
reaching it in practice still requires \`profile: privileged\` or an equivalent capability/
\`runAs\` grant. Once connected, the container may request any role, same as extension
services; the RPC's own role requirements are what actually gate access.`},profile:{type:`string`,doc:`Security profile.

\`restricted\` drops all capabilities, allows no device access, and mounts the rootfs
and sysfs read-only. \`privileged\` grants all grantable capabilities and all devices,
which is what extension services get implicitly.`,enum:[`restricted`,`privileged`]}}},workingDir:{type:`string`,doc:`Overrides the image's WORKDIR.`}},class:`NoReboot`,privileged:`it runs a container with Talos directly, with the capabilities and host mounts it chooses`}},{kind:`DHCPv4Config`,key:`dhcpv4Config`,since:`v1.12`,schema:{type:`object`,props:{clientIdentifier:{type:`string`,doc:`Client identifier to use when communicating with DHCP servers.

Defaults to 'mac' if not set.

The value is Talos's textual form of ClientIdentifier.`,enum:[`none`,`mac`,`duid`]},duidRaw:{type:`string`,doc:`Raw value of the DUID to use as client identifier.

This field is only used if 'clientIdentifier' is set to 'duid'.

The value is Talos's textual form of HardwareAddr.`},ignoreHostname:{type:`boolean`,doc:`Ignore hostname received from the DHCP server.`},ignoreRoutes:{type:`boolean`,doc:`Ignore routes received from the DHCP server (the default gateway and classless static routes).

The connected route for the leased address is still configured.`},name:{type:`string`,doc:`Name of the link (interface).`},routeMetric:{type:`integer`,doc:`An optional metric for the routes received from the DHCP server.

Lower values indicate higher priority.
Default value is 1024.`,format:`int64`,min:0,max:4294967295}},class:`NoReboot`}},{kind:`DHCPv6Config`,key:`dhcpv6Config`,since:`v1.12`,schema:{type:`object`,props:{clientIdentifier:{type:`string`,doc:`Client identifier to use when communicating with DHCP servers.

Defaults to 'mac' if not set.

The value is Talos's textual form of ClientIdentifier.`,enum:[`none`,`mac`,`duid`]},duidRaw:{type:`string`,doc:`Raw value of the DUID to use as client identifier.

This field is only used if 'clientIdentifier' is set to 'duid'.

The value is Talos's textual form of HardwareAddr.`},ignoreHostname:{type:`boolean`,doc:`Ignore hostname received from the DHCP server.`},name:{type:`string`,doc:`Name of the link (interface).`},routeMetric:{type:`integer`,doc:`An optional metric for the routes received from the DHCP server.

Lower values indicate higher priority.
Default value is 1024.`,format:`int64`,min:0,max:4294967295}},class:`NoReboot`}},{kind:`DiscoveryServiceConfig`,key:`discoveryServiceConfig`,since:`v1.14`,schema:{type:`object`,props:{endpoint:{type:`string`,doc:`Discovery service endpoint to use.

A URL.`},name:{type:`string`,doc:`Name of the discovery service configuration.`}},class:`NoReboot`}},{kind:`DummyLinkConfig`,key:`dummyLinkConfig`,since:`v1.12`,schema:{type:`object`,props:{addresses:{type:`array`,doc:`Configure addresses to be statically assigned to the link.`,items:{type:`object`,props:{address:{type:`string`,doc:`IP address to be assigned to the link.

This field must include the network prefix length (e.g. /24 for IPv4, /64 for IPv6).

An IP prefix in CIDR notation.`},routePriority:{type:`integer`,doc:`Configure the route priority (metric) for routes created for this address.

If not specified, the system default route priority will be used.`,format:`int64`,min:0,max:4294967295}}}},hardwareAddr:{type:`string`,doc:`Override the hardware (MAC) address of the link.

The value is Talos's textual form of HardwareAddr.`},mtu:{type:`integer`,doc:`Configure LinkMTU (Maximum Transmission Unit) for the link.

If not specified, the system default LinkMTU will be used (usually 1500).`,format:`int64`,min:0,max:4294967295},multicast:{type:`boolean`,doc:`Set the multicast capability of the link.`},name:{type:`string`,doc:`Name of the dummy link (interface).`},routes:{type:`array`,doc:`Configure routes to be statically created via the link.`,items:{type:`object`,props:{destination:{type:`string`,doc:`The route's destination as an address prefix.

If not specified, a default route will be created for the address family of the gateway.

An IP prefix in CIDR notation.`},gateway:{type:`string`,doc:`The route's gateway (if empty, creates link scope route).

An IP address.`},metric:{type:`integer`,doc:`The optional metric for the route.`,format:`int64`,min:0,max:4294967295},mtu:{type:`integer`,doc:`The optional MTU for the route.`,format:`int64`,min:0,max:4294967295},source:{type:`string`,doc:`The route's source address (optional).

An IP address.`},table:{type:`string`,doc:`The routing table to use for the route.

If not specified, the main routing table will be used.

The value is Talos's textual form of RoutingTable.`}}}},up:{type:`boolean`,doc:`Bring the link up or down.

If not specified, the link will be brought up.`}},class:`NoReboot`}},{kind:`EnvironmentConfig`,key:`environmentConfig`,since:`v1.13`,schema:{type:`object`,props:{variables:{type:`map`,doc:`This field allows for the addition of environment variables.
All environment variables are set on PID 1 in addition to every service.
Propagation of environment variables to services is done only at initial service start time.
To modify environment variables for services, the node must be restarted.
Multiple values for the same environment variable (in multiple documents) will replace previous values, with the last one taking precedence.
Fully removing an environment variable can only be achieved by removing it from the document and restarting the machine.
Environment variable names are validated, and should:
- start with an uppercase letter, lowercase letter, or an underscore (_) character, and
- contain only uppercase and lowercase letters, underscore (_) characters, and numbers.`,keys:[`GRPC_GO_LOG_VERBOSITY_LEVEL`,`GRPC_GO_LOG_SEVERITY_LEVEL`,`http_proxy`,`https_proxy`,`no_proxy`],values:{type:`string`}}},class:`NoReboot`,privileged:`it sets the environment of Talos's own processes, which run as root`}},{kind:`EtcFileConfig`,key:`etcFileConfig`,since:`v1.14`,schema:{type:`object`,props:{contents:{type:`string`,doc:`The contents of the file.`},mode:{type:`integer`,doc:`The file's permissions in octal.`,format:`int64`,min:0,max:4294967295},name:{type:`string`,doc:"Path of the file relative to `/etc`."}},class:`NoReboot`,privileged:`it writes files on the node's root filesystem, which root processes read`}},{kind:`EthernetConfig`,key:`ethernetConfig`,since:`v1.10`,schema:{type:`object`,props:{channels:{type:`object`,doc:`Configuration for Ethernet link channels.

This is similar to \`ethtool -L\` command.`,props:{combined:{type:`integer`,doc:`Number of combined channels.`,format:`int64`,min:0,max:4294967295},other:{type:`integer`,doc:`Number of other channels.`,format:`int64`,min:0,max:4294967295},rx:{type:`integer`,doc:`Number of RX channels.`,format:`int64`,min:0,max:4294967295},tx:{type:`integer`,doc:`Number of TX channels.`,format:`int64`,min:0,max:4294967295}}},features:{type:`map`,doc:`Configuration for Ethernet features.

Set of features available and whether they can be enabled or disabled is driver specific.
Use \`talosctl get ethernetstatus <link> -o yaml\` to get the list of available features and
their current status.`,values:{type:`boolean`}},name:{type:`string`,doc:`Name of the link (interface).`},rings:{type:`object`,doc:`Configuration for Ethernet link rings.

This is similar to \`ethtool -G\` command.`,props:{"cqe-size":{type:`integer`,doc:`CQE size.`,format:`int64`,min:0,max:4294967295},rx:{type:`integer`,doc:`Number of RX rings.`,format:`int64`,min:0,max:4294967295},"rx-buf-len":{type:`integer`,doc:`RX buffer length.`,format:`int64`,min:0,max:4294967295},"rx-jumbo":{type:`integer`,doc:`Number of RX jumbo rings.`,format:`int64`,min:0,max:4294967295},"rx-mini":{type:`integer`,doc:`Number of RX mini rings.`,format:`int64`,min:0,max:4294967295},"rx-push":{type:`boolean`,doc:`RX push enabled.`},"tcp-data-split":{type:`boolean`,doc:`TCP data split enabled.`},tx:{type:`integer`,doc:`Number of TX rings.`,format:`int64`,min:0,max:4294967295},"tx-push":{type:`boolean`,doc:`TX push enabled.`},"tx-push-buf-len":{type:`integer`,doc:`TX push buffer length.`,format:`int64`,min:0,max:4294967295}}},wakeOnLan:{type:`array`,doc:`Wake-on-LAN modes to enable.

If this field is omitted, Wake-on-LAN configuration is not changed.
An empty list disables Wake-on-LAN.

This is similar to \`ethtool -s <link> wol <options>\` command.

The value is Talos's textual form of WOLMode.`,items:{type:`string`,enum:[`phy`,`unicast`,`multicast`,`broadcast`,`arp`,`magic`,`magicsecure`,`filter`]}}},class:`NoReboot`}},{kind:`EventSinkConfig`,key:`eventSinkConfig`,since:`v1.5`,schema:{type:`object`,props:{endpoint:{type:`string`,doc:`The endpoint for the event sink as 'host:port'.`}},class:`NoReboot`}},{kind:`ExistingVolumeConfig`,key:`existingVolumeConfig`,since:`v1.11`,schema:{type:`object`,props:{discovery:{type:`object`,doc:`The discovery describes how to find a volume.`,props:{volumeSelector:{type:`object`,doc:`The volume selector expression.`,props:{match:{type:`string`,doc:`The Common Expression Language (CEL) expression to match the volume.

A CEL expression.`}}}}},mount:{type:`object`,doc:`The mount describes additional mount options.`,props:{disableAccessTime:{type:`boolean`,doc:`If true, disable file access time updates.`},readOnly:{type:`boolean`,doc:`Mount the volume read-only.`},secure:{type:`boolean`,doc:`Enable secure mount options (nosuid, nodev, noexec).

Defaults to true for better security.`}}},name:{type:`string`,doc:`Name of the volume.

Name can only contain:
lowercase and uppercase ASCII letters, digits, and hyphens.`},scrub:{type:`object`,doc:`The scrub describes the per-volume filesystem scrub configuration.`,props:{enabled:{type:`boolean`,doc:`Enable or disable scrubbing for this volume.

If not set, scrubbing is enabled by default when scrub section is present.`},interval:{type:`string`,doc:`The interval at which the volume is scrubbed, overriding the global scrub interval.

A duration such as 30s or 1h5m.`}}},trim:{type:`object`,doc:`The trim describes the per-volume filesystem trim (fstrim) configuration.`,props:{enabled:{type:`boolean`,doc:`Enable or disable trimming for this volume.

If not set, trimming is enabled when the global FilesystemTrimConfig is present.`},interval:{type:`string`,doc:`The interval at which the volume is trimmed, overriding the global trim interval.

A duration such as 30s or 1h5m.`}}}},class:`NoReboot`}},{kind:`ExtensionServiceConfig`,key:`extensionServiceConfig`,since:`v1.7`,schema:{type:`object`,props:{configFiles:{type:`array`,doc:`The config files for the extension service.`,items:{type:`object`,props:{content:{type:`string`,doc:`The content of the extension service config file.`},mountPath:{type:`string`,doc:`The mount path of the extension service config file.`}}}},environment:{type:`array`,doc:`The environment for the extension service.`,items:{type:`string`}},name:{type:`string`,doc:`Name of the extension service.`}},class:`NoReboot`,privileged:`it configures the service of a system extension, which runs as root (its files and environment)`}},{kind:`ExternalVolumeConfig`,key:`externalVolumeConfig`,since:`v1.13`,schema:{type:`object`,props:{filesystemType:{type:`string`,doc:`Filesystem type.

The value is Talos's textual form of FilesystemType.`,enum:[`virtiofs`]},mount:{type:`object`,doc:`The mount describes additional mount options.`,props:{disableAccessTime:{type:`boolean`,doc:`If true, disable file access time updates.`},readOnly:{type:`boolean`,doc:`Mount the volume read-only.`},secure:{type:`boolean`,doc:`Enable secure mount options (nosuid, nodev, noexec).

Defaults to true for better security.`},virtiofs:{type:`object`,doc:`Virtiofs mount options.`,props:{tag:{type:`string`,doc:`Selector tag for the Virtiofs mount.`}}}}},name:{type:`string`,doc:`Name of the mount.

Name might be between 1 and 34 characters long and can only contain:
lowercase and uppercase ASCII letters, digits, and hyphens.`}},class:`NoReboot`}},{kind:`FilesystemScrubConfig`,key:`filesystemScrubConfig`,since:`v1.14`,schema:{type:`object`,props:{interval:{type:`string`,doc:`The interval at which the filesystems are scrubbed.

Default value is 1 week, minimum value is 10 seconds.

A duration such as 30s or 1h5m.`}},class:`NoReboot`}},{kind:`FilesystemTrimConfig`,key:`filesystemTrimConfig`,since:`v1.14`,schema:{type:`object`,props:{interval:{type:`string`,doc:`The interval at which the filesystems are trimmed.

The trim is performed at a stable, hash-derived time within the interval, which is different
for each volume and each node, so that trims are spread out over time.

A duration such as 30s or 1h5m.`}},class:`NoReboot`}},{kind:`HTTPProbeConfig`,key:`httpProbeConfig`,since:`v1.14`,schema:{type:`object`,props:{failureThreshold:{type:`integer`,doc:`Number of consecutive failures for the probe to be considered failed after having succeeded.
Defaults to 0 (immediately fail on first failure).`},interval:{type:`string`,doc:`Interval between probe attempts.
Defaults to 1s.

A duration such as 30s or 1h5m.`},name:{type:`string`,doc:`Name of the probe.`},timeout:{type:`string`,doc:`Timeout for the probe.
Defaults to 10s.

A duration such as 30s or 1h5m.`},url:{type:`string`,doc:`HTTP or HTTPS URL to probe. The probe succeeds if the server responds with a 2xx or 3xx status code.
Probe does not follow redirects.

A URL.`}},class:`NoReboot`}},{kind:`HostnameConfig`,key:`hostnameConfig`,since:`v1.12`,schema:{type:`object`,props:{auto:{type:`string`,doc:`A method to automatically generate a hostname for the machine.

There are two methods available:
- \`stable\` - generates a stable hostname based on machine identity
- \`off\` - disables automatic hostname generation, Talos will wait for an external source to provide a hostname (DHCP, cloud-init, etc).

Automatic hostnames have the lowest priority over any other hostname sources: DHCP, cloud-init, etc.
Conflicts with \`hostname\` field.

The value is Talos's textual form of AutoHostnameKind.`,enum:[`stable`,`off`]},hostname:{type:`string`,doc:`A static hostname to set for the machine.

This hostname has the highest priority over any other hostname sources: DHCP, cloud-init, etc.
Conflicts with \`auto\` field.`}},class:`NoReboot`}},{kind:`ImageCacheConfig`,key:`imageCacheConfig`,since:`v1.14`,schema:{type:`object`,props:{local:{type:`object`,doc:`Local (to the machine) image cache configuration.`,props:{enabled:{type:`boolean`,doc:`Is the local image cache enabled.`}}}},class:`NoReboot`}},{kind:`ImageVerificationConfig`,key:`imageVerificationConfig`,since:`v1.13`,schema:{type:`object`,props:{rules:{type:`array`,doc:`List of verification rules.
Rules are evaluated in order; first matching rule applies.`,items:{type:`object`,props:{deny:{type:`boolean`,doc:`Deny pulling images matching the pattern (default: false).`},image:{type:`string`,doc:"Image reference pattern to match for this rule.\nSupports glob patterns, matches only on the image registry and repository, not on the tag or digest.\n\nThe pattern is matched against the normalized image reference, which always starts with a registry\ndomain: `docker.io/library/nginx*` matches `nginx:latest`, while `library/nginx*` matches nothing.\nThe Docker Hub domain is always normalized to `docker.io`, so a pattern written against\n`index.docker.io` or `registry-1.docker.io` matches the same images a `docker.io` one does."},keyless:{type:`object`,doc:`Keyless verifier configuration to use for this rule.`,props:{issuer:{type:`string`,doc:`OIDC issuer URL for keyless verification.`},subject:{type:`string`,doc:`Expected subject for keyless verification.

This is the identity (email, URI) that signed the image.`},subjectRegex:{type:`string`,doc:`Regex pattern for subject matching.

Use this instead of subject for flexible matching.`}}},publicKey:{type:`object`,doc:`Public key verifier configuration to use for this rule.`,props:{certificate:{type:`string`,doc:`A public certificate in PEM format accepted for image signature verification.`}}},skip:{type:`boolean`,doc:`Skip verification for this image pattern (default: false).`}}}}},class:`NoReboot`}},{kind:`KernelModuleConfig`,key:`kernelModuleConfig`,since:`v1.14`,schema:{type:`object`,props:{name:{type:`string`,doc:`Module name.`},parameters:{type:`array`,doc:`Module parameters, changes applied after reboot.`,items:{type:`string`}}},class:`NoReboot`}},{kind:`KmsgLogConfig`,key:`kmsgLogConfig`,since:`v1.5`,schema:{type:`object`,props:{name:{type:`string`,doc:`Name of the config document.`},url:{type:`string`,doc:`The URL encodes the log destination.
The scheme must be tcp:// or udp://.
The path must be empty.
The port is required.

A URL.`}},class:`NoReboot`}},{kind:`KubeAPIServerConfig`,key:`kubeAPIServerConfig`,since:`v1.14`,schema:{type:`object`,props:{apiPort:{type:`integer`,doc:`The port on which the kube-apiserver will listen for requests.

Default is 6443.`},certExtraSANs:{type:`array`,doc:`Provide extra certificate SANs (hostnames, IPs) to add to the kube-apiserver serving certificate.

Talos automatically adds machine's addresses and hostnames, Kubernetes names, and control plane endpoint
derived SANs to the kube-apiserver serving certificate.
This field allows for adding additional SANs to the serving certificate.`,items:{type:`string`}},env:{type:`map`,doc:"The `env` field allows for the addition of environment variables for the kube-apiserver.",values:{type:`string`},privileged:`it sets the environment of a component that runs with full rights (root on the node, or the cluster's keys)`},extraArgs:{type:`map`,doc:"Extra command line arguments to supply to the kube-apiserver.\n\nArguments owned by other configuration documents are rejected:\n`anonymous-auth`, `authentication-config` and `oidc-*` are set via `KubeAuthenticationConfig`, while\n`authorization-config`, `authorization-mode` and `authorization-webhook-*` are set via `KubeAuthorizerConfig`.\n\nThe single exception is `oidc-signing-algs`, which cannot be set at all: see `KubeAuthenticationConfig`.",values:{type:`object`,maxProps:1,props:{value:{type:`string`,doc:`value is the argument's single value.`},values:{type:`array`,doc:`values are the argument's values; the flag is passed once per value.`,items:{type:`string`}}}},privileged:`it sets the command-line flags of a component that runs with full rights (root on the node, or the cluster's keys)`},image:{type:`string`,doc:`The container image used to run the kube-apiserver component.

The image reference should contain the tag, even if it is pinned by digest.`,privileged:`it chooses the image of a component that runs with full rights (root on the node, or the cluster's keys)`},resources:{type:`object`,doc:`Configure the kube-apiserver resources.`,props:{limits:{type:`map`,doc:`Limits configures the maximum cpu/memory limits a pod can use.

Typed as a Kubernetes resource list (for example cpu: 500m, memory: 1Gi).`,values:{type:`intOrString`,pattern:`^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$`}},requests:{type:`map`,doc:`Requests configures the reserved cpu/memory resources.

Typed as a Kubernetes resource list (for example cpu: 500m, memory: 1Gi).`,values:{type:`intOrString`,pattern:`^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$`}}}},startupProbes:{type:`boolean`,doc:`Enable or disable startup probes for kube-apiserver.

Default is enabled.`}},class:`APIServerRestart`}},{kind:`KubeControllerManagerConfig`,key:`kubeControllerManagerConfig`,since:`v1.14`,schema:{type:`object`,props:{enabled:{type:`boolean`,doc:`By default, kube-controller-manager static pod is enabled.
Set to false to disable the kube-controller-manager (assuming it runs on other controlplane node).`},env:{type:`map`,doc:"The `env` field allows for the addition of environment variables for the kube-controller-manager.",values:{type:`string`},privileged:`it sets the environment of a component that runs with full rights (root on the node, or the cluster's keys)`},extraArgs:{type:`map`,doc:`Extra command line arguments to supply to the kube-controller-manager.`,values:{type:`object`,maxProps:1,props:{value:{type:`string`,doc:`value is the argument's single value.`},values:{type:`array`,doc:`values are the argument's values; the flag is passed once per value.`,items:{type:`string`}}}},privileged:`it sets the command-line flags of a component that runs with full rights (root on the node, or the cluster's keys)`},image:{type:`string`,doc:`The container image used to run the kube-controller-manager component.

The image reference should contain the tag, even if it is pinned by digest.`,privileged:`it chooses the image of a component that runs with full rights (root on the node, or the cluster's keys)`},resources:{type:`object`,doc:`Configure the kube-controller-manager resources.`,props:{limits:{type:`map`,doc:`Limits configures the maximum cpu/memory limits a pod can use.

Typed as a Kubernetes resource list (for example cpu: 500m, memory: 1Gi).`,values:{type:`intOrString`,pattern:`^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$`}},requests:{type:`map`,doc:`Requests configures the reserved cpu/memory resources.

Typed as a Kubernetes resource list (for example cpu: 500m, memory: 1Gi).`,values:{type:`intOrString`,pattern:`^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$`}}}}},class:`NoReboot`}},{kind:`KubeCoreDNSConfig`,key:`kubeCoreDNSConfig`,since:`v1.14`,schema:{type:`object`,props:{enabled:{type:`boolean`,doc:`By default, CoreDNS deployment is enabled.
Set to false to disable the CoreDNS deployment.`},image:{type:`string`,doc:`The container image used to run the CoreDNS.

If the value is not set, the default image will be used.`}},class:`NoReboot`}},{kind:`KubeCredentialProviderConfig`,key:`kubeCredentialProviderConfig`,since:`v1.14`,schema:{type:`object`,props:{configuration:{type:`object`,doc:`Kubelet credential provider configuration (used for image registry authentication).
The value is the literal kubelet's credential provider configuration.

Typed as the kubelet's CredentialProviderConfig (kubelet.config.k8s.io/v1).`,required:[`providers`],props:{apiVersion:{type:`string`,doc:`APIVersion defines the versioned schema of this representation of an object.
Servers should convert recognized schemas to the latest internal value, and
may reject unrecognized values.
More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources`},kind:{type:`string`,doc:`Kind is a string value representing the REST resource this object represents.
Servers may infer this from the endpoint the client submits requests to.
Cannot be updated.
In CamelCase.
More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds`},providers:{type:`array`,doc:`providers is a list of credential provider plugins that will be enabled by the kubelet.
Multiple providers may match against a single image, in which case credentials
from all providers will be returned to the kubelet. If multiple providers are called
for a single image, the results are combined. If providers return overlapping
auth keys, the value from the provider earlier in this list is attempted first.`,items:{type:`object`,required:[`apiVersion`,`defaultCacheDuration`,`matchImages`,`name`],props:{apiVersion:{type:`string`,doc:`Required input version of the exec CredentialProviderRequest. The returned CredentialProviderResponse
MUST use the same encoding version as the input. Current supported values are:
- credentialprovider.kubelet.k8s.io/v1`},args:{type:`array`,doc:`Arguments to pass to the command when executing it.`,items:{type:`string`}},defaultCacheDuration:{type:`string`,doc:`defaultCacheDuration is the default duration the plugin will cache credentials in-memory
if a cache duration is not provided in the plugin response. This field is required.`},env:{type:`array`,doc:`Env defines additional environment variables to expose to the process. These
are unioned with the host's environment, as well as variables client-go uses
to pass argument to the plugin.`,items:{type:`object`,required:[`name`,`value`],props:{name:{type:`string`},value:{type:`string`}}}},matchImages:{type:`array`,doc:`matchImages is a required list of strings used to match against images in order to
determine if this provider should be invoked. If one of the strings matches the
requested image from the kubelet, the plugin will be invoked and given a chance
to provide credentials. Images are expected to contain the registry domain
and URL path.

Each entry in matchImages is a pattern which can optionally contain a port and a path.
Globs can be used in the domain, but not in the port or the path. Globs are supported
as subdomains like '*.k8s.io' or 'k8s.*.io', and top-level-domains such as 'k8s.*'.
Matching partial subdomains like 'app*.k8s.io' is also supported. Each glob can only match
a single subdomain segment, so *.io does not match *.k8s.io.

A match exists between an image and a matchImage when all of the below are true:
- Both contain the same number of domain parts and each part matches.
- The URL path of an imageMatch must be a prefix of the target image URL path.
- If the imageMatch contains a port, then the port must match in the image as well.

Example values of matchImages:
  - 123456789.dkr.ecr.us-east-1.amazonaws.com
  - *.azurecr.io
  - gcr.io
  - *.*.registry.io
  - registry.io:8080/path`,items:{type:`string`}},name:{type:`string`,doc:`name is the required name of the credential provider. It must match the name of the
provider executable as seen by the kubelet. The executable must be in the kubelet's
bin directory (set by the --image-credential-provider-bin-dir flag).
Required to be unique across all providers.`},tokenAttributes:{type:`object`,doc:`tokenAttributes is the configuration for the service account token that will be passed to the plugin.
The credential provider opts in to using service account tokens for image pull by setting this field.
When this field is set, kubelet will generate a service account token bound to the pod for which the
image is being pulled and pass to the plugin as part of CredentialProviderRequest along with other
attributes required by the plugin.

The service account metadata and token attributes will be used as a dimension to cache
the credentials in kubelet. The cache key is generated by combining the service account metadata
(namespace, name, UID, and annotations key+value for the keys defined in
serviceAccountTokenAttribute.requiredServiceAccountAnnotationKeys and serviceAccountTokenAttribute.optionalServiceAccountAnnotationKeys).
The pod metadata (namespace, name, UID) that are in the service account token are not used as a dimension
to cache the credentials in kubelet. This means workloads that are using the same service account
could end up using the same credentials for image pull. For plugins that don't want this behavior, or
plugins that operate in pass-through mode; i.e., they return the service account token as-is, they
can set the credentialProviderResponse.cacheDuration to 0. This will disable the caching of
credentials in kubelet and the plugin will be invoked for every image pull. This does result in
token generation overhead for every image pull, but it is the only way to ensure that the
credentials are not shared across pods (even if they are using the same service account).`,required:[`cacheType`,`requireServiceAccount`,`serviceAccountTokenAudience`],props:{cacheType:{type:`string`,doc:`cacheType indicates the type of cache key use for caching the credentials returned by the plugin
when the service account token is used.
The most conservative option is to set this to "Token", which means the kubelet will cache returned credentials
on a per-token basis. This should be set if the returned credential's lifetime is limited to the service account
token's lifetime.
If the plugin's credential retrieval logic depends only on the service account and not on pod-specific claims,
then the plugin can set this to "ServiceAccount". In this case, the kubelet will cache returned credentials
on a per-serviceaccount basis. Use this when the returned credential is valid for all pods using the same service account.`},optionalServiceAccountAnnotationKeys:{type:`array`,doc:`optionalServiceAccountAnnotationKeys is the list of annotation keys that the plugin is interested in
and that are optional to be present in the service account.
The keys defined in this list will be extracted from the corresponding service account and passed
to the plugin as part of the CredentialProviderRequest. The plugin is responsible for validating
the existence of annotations and their values.
This field is optional and may be empty. Plugins may use this field to extract
additional information required to fetch credentials.
Keys in this list must be unique.`,items:{type:`string`}},requireServiceAccount:{type:`boolean`,doc:`requireServiceAccount indicates whether the plugin requires the pod to have a service account.
If set to true, kubelet will only invoke the plugin if the pod has a service account.
If set to false, kubelet will invoke the plugin even if the pod does not have a service account
and will not include a token in the CredentialProviderRequest in that scenario. This is useful for plugins that
are used to pull images for pods without service accounts (e.g., static pods).`},requiredServiceAccountAnnotationKeys:{type:`array`,doc:`requiredServiceAccountAnnotationKeys is the list of annotation keys that the plugin is interested in
and that are required to be present in the service account.
The keys defined in this list will be extracted from the corresponding service account and passed
to the plugin as part of the CredentialProviderRequest. If any of the keys defined in this list
are not present in the service account, kubelet will not invoke the plugin and will return an error.
This field is optional and may be empty. Plugins may use this field to extract
additional information required to fetch credentials or allow workloads to opt in to
using service account tokens for image pull.
If non-empty, requireServiceAccount must be set to true.
Keys in this list must be unique.
This list needs to be mutually exclusive with optionalServiceAccountAnnotationKeys.`,items:{type:`string`}},serviceAccountTokenAudience:{type:`string`,doc:`serviceAccountTokenAudience is the intended audience for the projected service account token.`}}}}}}}}},class:`NoReboot`}},{kind:`KubeExternalManifestConfig`,key:`kubeExternalManifestConfig`,since:`v1.14`,schema:{type:`object`,props:{headers:{type:`map`,doc:`Optional HTTP headers to use when downloading the manifest.`,values:{type:`string`}},name:{type:`string`,doc:`Name of manifest.`},url:{type:`string`,doc:`Kubernetes manifest definition, via the URL to download it from.
Please note that Talos does not watch URL contents, and might download
the manifest only once, during the boot.

A URL.`}},class:`NoReboot`,privileged:`its manifests are applied to the cluster with cluster-admin rights`}},{kind:`KubeInlineManifestConfig`,key:`kubeInlineManifestConfig`,since:`v1.14`,schema:{type:`object`,props:{manifest:{type:`string`,doc:"Kubernetes manifest definition, it is supplied as a raw string.\nIt might contain a set of YAML documents separated by `---`.\nThe format matches what can be supplied as `kubectl apply -f <file>`."},name:{type:`string`,doc:`Name of manifest.`}},class:`NoReboot`,privileged:`its manifests are applied to the cluster with cluster-admin rights`}},{kind:`KubeNodeConfig`,key:`kubeNodeConfig`,since:`v1.14`,schema:{type:`object`,props:{annotations:{type:`map`,doc:`Configures the node annotations for the machine.`,values:{type:`string`}},labels:{type:`map`,doc:`Configures the node labels for the machine.

Note: In the default Kubernetes configuration, worker nodes are restricted to set
labels with some prefixes (see [NodeRestriction](https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#noderestriction) admission plugin).`,values:{type:`string`}},nodeIP:{type:`object`,doc:"The `nodeIP` field is used to configure `--node-ip` flag for the kubelet.\nThis field should be set when a node has multiple addresses to choose from.",props:{validSubnets:{type:`array`,doc:"The `validSubnets` field configures the networks to pick kubelet node IP from.\nFor dual stack configuration, there should be two subnets: one for IPv4, another for IPv6.\nIPs can be excluded from the list by using negative match with `!`, e.g `!10.0.0.0/8`.\nNegative subnet matches should be specified last to filter out IPs picked by positive matches.\nIf not specified, node IP is picked based on cluster podCIDRs: IPv4/IPv6 address or both.",items:{type:`string`}}}},registerWithFQDN:{type:`boolean`,doc:"The `registerWithFQDN` field is used to force kubelet to use the node FQDN for registration.\nThis is required in clouds like AWS."},skipNodeRegistration:{type:`boolean`,doc:`The \`skipNodeRegistration\` is used to run the kubelet without registering with the apiserver.
This runs kubelet as standalone and only runs static pods.
When this is set to true, other fields in this document are ignored.`},taints:{type:`map`,doc:`Configures the node taints for the machine. Effect is optional.

Note: In the default Kubernetes configuration, worker nodes are not allowed to
modify the taints (see [NodeRestriction](https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#noderestriction) admission plugin).`,values:{type:`string`}}},class:`NoReboot`}},{kind:`KubeSchedulerConfig`,key:`kubeSchedulerConfig`,since:`v1.14`,schema:{type:`object`,props:{enabled:{type:`boolean`,doc:`By default, kube-scheduler static pod is enabled.
Set to false to disable the kube-scheduler (assuming it runs on other controlplane node).`},env:{type:`map`,doc:"The `env` field allows for the addition of environment variables for the kube-scheduler.",values:{type:`string`},privileged:`it sets the environment of a component that runs with full rights (root on the node, or the cluster's keys)`},extraArgs:{type:`map`,doc:`Extra command line arguments to supply to the kube-scheduler.

It is preferable to use \`config\` field to provide configuration overrides.`,values:{type:`object`,maxProps:1,props:{value:{type:`string`,doc:`value is the argument's single value.`},values:{type:`array`,doc:`values are the argument's values; the flag is passed once per value.`,items:{type:`string`}}}},privileged:`it sets the command-line flags of a component that runs with full rights (root on the node, or the cluster's keys)`},image:{type:`string`,doc:`The container image used to run the kube-scheduler component.

The image reference should contain the tag, even if it is pinned by digest.`,privileged:`it chooses the image of a component that runs with full rights (root on the node, or the cluster's keys)`},resources:{type:`object`,doc:`Configure the kube-scheduler resources.`,props:{limits:{type:`map`,doc:`Limits configures the maximum cpu/memory limits a pod can use.

Typed as a Kubernetes resource list (for example cpu: 500m, memory: 1Gi).`,values:{type:`intOrString`,pattern:`^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$`}},requests:{type:`map`,doc:`Requests configures the reserved cpu/memory resources.

Typed as a Kubernetes resource list (for example cpu: 500m, memory: 1Gi).`,values:{type:`intOrString`,pattern:`^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$`}}}}},class:`NoReboot`}},{kind:`KubeSpanConfig`,key:`kubeSpanConfig`,since:`v1.13`,schema:{type:`object`,props:{advertiseKubernetesNetworks:{type:`boolean`,doc:`Control whether Kubernetes pod CIDRs are announced over KubeSpan from the node.
If disabled, CNI handles pod-to-pod traffic encapsulation.
If enabled, KubeSpan takes over pod-to-pod traffic directly.`},allowDownPeerBypass:{type:`boolean`,doc:`Skip sending traffic via KubeSpan if the peer connection state is not up.
This provides configurable choice between connectivity and security.`},enabled:{type:`boolean`,doc:`Enable the KubeSpan feature.
Requires cluster discovery to be enabled through a DiscoveryServiceConfig document.`},filters:{type:`object`,doc:`KubeSpan advanced filtering of network addresses.
Settings are optional and apply only to this node.`,props:{endpoints:{type:`array`,doc:`Filter node addresses which will be advertised as KubeSpan endpoints for peer-to-peer Wireguard connections.

By default, all addresses are advertised, and KubeSpan cycles through all endpoints until it finds one that works.

Default value: no filtering.`,items:{type:`string`}},excludeAdvertisedNetworks:{type:`array`,doc:`Filter networks (e.g., host addresses, pod CIDRs if enabled) which will be advertised over KubeSpan.

By default, all networks are advertised.
Use this filter to exclude some networks from being advertised.

Note: excluded networks will not be reachable over KubeSpan, so make sure
these networks are still reachable via some other route (e.g., direct connection).

Default value: no filtering.

An IP prefix in CIDR notation.`,items:{type:`string`}}}},harvestExtraEndpoints:{type:`boolean`,doc:`KubeSpan can collect and publish extra endpoints for each member of the cluster
based on Wireguard endpoint information for each peer.
Disabled by default. Do not enable with high peer counts (>50).`},mtu:{type:`integer`,doc:`KubeSpan link MTU size.
Default value is 1420.`,format:`int64`,min:0,max:4294967295}},class:`NoReboot`}},{kind:`KubeSpanEndpointsConfig`,key:`kubeSpanEndpointsConfig`,since:`v1.8`,schema:{type:`object`,props:{extraAnnouncedEndpoints:{type:`array`,doc:`A list of extra Wireguard endpoints to announce from this machine.

Talos automatically adds endpoints based on machine addresses, public IP, etc.
This field allows to add extra endpoints which are managed outside of Talos, e.g. NAT mapping.

An IP address and port.`,items:{type:`string`}}},class:`NoReboot`}},{kind:`KubeTalosAPIAccessConfig`,key:`kubeTalosAPIAccessConfig`,since:`v1.14`,schema:{type:`object`,props:{allowedKubernetesNamespaces:{type:`array`,doc:`The list of Kubernetes namespaces Talos API access is available from.`,items:{type:`string`}},allowedRoles:{type:`array`,doc:`The list of Talos API roles which can be granted for access from Kubernetes pods.

Empty list means that no roles can be granted, so access is blocked.`,items:{type:`string`}}},class:`NoReboot`,privileged:`it lets pods reach the Talos API with the roles it names, os:admin included`}},{kind:`KubeletConfig`,key:`kubeletConfig`,since:`v1.14`,schema:{type:`object`,props:{clusterDNS:{type:`array`,doc:"The `ClusterDNS` field is an optional reference to an alternative kubelet clusterDNS ip list.",items:{type:`string`}},defaultRuntimeSeccompProfileEnabled:{type:`boolean`,doc:`Enable container runtime default Seccomp profile.`},extraArgs:{type:`map`,doc:`Extra command line arguments to supply to the kubelet.

It is preferable to use \`config\` field to provide configuration overrides.`,values:{type:`object`,maxProps:1,props:{value:{type:`string`,doc:`value is the argument's single value.`},values:{type:`array`,doc:`values are the argument's values; the flag is passed once per value.`,items:{type:`string`}}}},privileged:`it sets the command-line flags of a component that runs with full rights (root on the node, or the cluster's keys)`},image:{type:`string`,doc:`The container image used to run the kubelet component.

The image reference should contain the tag, even if it is pinned by digest.`,privileged:`it chooses the image of a component that runs with full rights (root on the node, or the cluster's keys)`}},class:`NoReboot`}},{kind:`LVMLogicalVolumeConfig`,key:`lvmLogicalVolumeConfig`,since:`v1.14`,schema:{type:`object`,props:{mirrors:{type:`integer`,doc:"Number of mirror copies for `raid1` / `raid10` layouts.\n\nDefaults to 1 (a two-way mirror) when unset. Not valid for `linear`\nor `raid0`.",format:`int64`,min:0,max:4294967295},name:{type:`string`,doc:`Logical volume name.

Must be 1-63 chars: ASCII letters, digits, hyphens, underscores.`},provisioning:{type:`object`,doc:`Describes how the logical volume is provisioned.`,props:{maxSize:{type:`string`,doc:`The maximum size of the volume.

Size is specified in bytes or in percents of the volume group.
It can be expressed in human readable format, e.g. 100MB or 80%.

A size: a byte size such as 10GiB or a percentage such as 50%.`},minSize:{type:`string`,doc:`The minimum size of the volume.

Size is specified in bytes, but can be expressed in human readable format, e.g. 100MB.

A byte size: a number of bytes or a human-readable size such as 100MiB.`},volumeGroup:{type:`string`,doc:`Name of the volume group that backs the logical volume.`}}},stripes:{type:`integer`,doc:"Number of stripes for `raid0` / `raid10` layouts.\n\nDefaults to all available physical volumes when unset. Must be at\nleast 2. Not valid for `linear` or `raid1`.",format:`int64`,min:0,max:4294967295},type:{type:`string`,doc:`Logical volume layout.

The value is Talos's textual form of LVMLogicalVolumeType.`,enum:[`linear`,`raid0`,`raid1`,`raid10`]}},class:`NoReboot`}},{kind:`LVMVolumeGroupConfig`,key:`lvmVolumeGroupConfig`,since:`v1.14`,schema:{type:`object`,props:{name:{type:`string`,doc:`Volume group name.

Must be 1-63 chars: ASCII letters, digits, hyphens, underscores.`},provisioning:{type:`object`,doc:`The provisioning describes how the Physical Volumes are provisioned.`,props:{volumeSelector:{type:`object`,doc:`Matches disks to initialize as physical volumes.`,props:{match:{type:`string`,doc:`CEL expression matching a disk or partition to use as a physical volume.

The expression is evaluated against each discovered volume with the
\`volume\` variable (the discovered volume) and, for whole disks, the
\`disk\` variable. Partitions (e.g. raw volumes) can be matched by their
partition label via \`volume.partition_label\`.

A volume declared in the machine config also matches on \`volume_id\`,
the volume name prefixed by its kind (\`u-\` user, \`r-\` raw, \`s-\` swap),
as in \`volume_id == "r-lvmdata"\`. A device Talos does not manage as a
volume has an empty \`volume_id\`.

Use \`volume_id\` for a whole-disk volume, which carries no partition
label to match on. Use it for an encrypted volume too: Talos creates
the physical volume on the opened device, never on the ciphertext.

Talos matches a declared volume only after the volume manager has
prepared it. Provisioning therefore waits for an encrypted volume to
be unlocked rather than write to the still-locked device.

A CEL expression.`}}}}}},class:`NoReboot`}},{kind:`Layer2VIPConfig`,key:`layer2VIPConfig`,since:`v1.12`,schema:{type:`object`,props:{link:{type:`string`,doc:`Name of the link to assign the VIP to.

Selector must match exactly one link, otherwise an error is returned.
If multiple selectors match the same link, the first one is used.`},name:{type:`string`,doc:`IP address to be advertised as a Layer 2 VIP.`}},class:`NoReboot`}},{kind:`LinkAliasConfig`,key:`linkAliasConfig`,since:`v1.12`,schema:{type:`object`,props:{name:{type:`string`,doc:`Alias for the link.

Don't use system interface names like "eth0", "ens3", "enp0s2", etc. as those may conflict
with existing physical interfaces.

The name can contain a single integer format verb (\`%d\`) to create multiple aliases
from a single config document. When a format verb is detected, each matched link receives a sequential
alias (e.g. \`net0\`, \`net1\`, ...) based on hardware address order of the links.
Links already aliased by a previous config are automatically skipped.`},selector:{type:`object`,doc:`Selector to match the link to alias.

When the alias name is a fixed string, the selector must match exactly one link.
When the alias name contains a format verb (e.g. \`net%d\`), the selector may match multiple links
and each match receives a sequential alias.
If multiple selectors match the same link, the first one is used.`,props:{match:{type:`string`,doc:`The Common Expression Language (CEL) expression to match the link.

A CEL expression.`}}}},class:`NoReboot`}},{kind:`LinkConfig`,key:`linkConfig`,since:`v1.12`,schema:{type:`object`,props:{addresses:{type:`array`,doc:`Configure addresses to be statically assigned to the link.`,items:{type:`object`,props:{address:{type:`string`,doc:`IP address to be assigned to the link.

This field must include the network prefix length (e.g. /24 for IPv4, /64 for IPv6).

An IP prefix in CIDR notation.`},routePriority:{type:`integer`,doc:`Configure the route priority (metric) for routes created for this address.

If not specified, the system default route priority will be used.`,format:`int64`,min:0,max:4294967295}}}},mtu:{type:`integer`,doc:`Configure LinkMTU (Maximum Transmission Unit) for the link.

If not specified, the system default LinkMTU will be used (usually 1500).`,format:`int64`,min:0,max:4294967295},multicast:{type:`boolean`,doc:`Set the multicast capability of the link.`},name:{type:`string`,doc:`Name of the link (interface).`},routes:{type:`array`,doc:`Configure routes to be statically created via the link.`,items:{type:`object`,props:{destination:{type:`string`,doc:`The route's destination as an address prefix.

If not specified, a default route will be created for the address family of the gateway.

An IP prefix in CIDR notation.`},gateway:{type:`string`,doc:`The route's gateway (if empty, creates link scope route).

An IP address.`},metric:{type:`integer`,doc:`The optional metric for the route.`,format:`int64`,min:0,max:4294967295},mtu:{type:`integer`,doc:`The optional MTU for the route.`,format:`int64`,min:0,max:4294967295},source:{type:`string`,doc:`The route's source address (optional).

An IP address.`},table:{type:`string`,doc:`The routing table to use for the route.

If not specified, the main routing table will be used.

The value is Talos's textual form of RoutingTable.`}}}},up:{type:`boolean`,doc:`Bring the link up or down.

If not specified, the link will be brought up.`}},class:`NoReboot`}},{kind:`NetworkDefaultActionConfig`,key:`networkDefaultActionConfig`,since:`v1.6`,schema:{type:`object`,props:{ingress:{type:`string`,doc:`Default action for all not explicitly configured ingress traffic: accept or block.

The value is Talos's textual form of DefaultAction.`,enum:[`accept`,`block`]}},class:`NoReboot`}},{kind:`NetworkRuleConfig`,key:`networkRuleConfig`,since:`v1.6`,schema:{type:`object`,props:{ingress:{type:`array`,doc:"Ingress defines which source subnets are allowed to access the host ports/protocols defined by the `portSelector`.",items:{type:`object`,props:{except:{type:`string`,doc:`Except defines a source subnet to exclude from the rule, it gets excluded from the \`subnet\`.

An IP prefix in CIDR notation.`},subnet:{type:`string`,doc:`Subnet defines a source subnet.

An IP prefix in CIDR notation.`}}}},name:{type:`string`,doc:`Name of the config document.`},portSelector:{type:`object`,doc:`Port selector defines which ports and protocols on the host are affected by the rule.`,props:{ports:{type:`array`,doc:`Ports defines a list of port ranges or single ports.
The port ranges are inclusive, and should not overlap.`,items:{type:`string`}},protocol:{type:`string`,doc:`Protocol defines traffic protocol (e.g. TCP or UDP).

The value is Talos's textual form of Protocol.`,enum:[`tcp`,`udp`,`icmp`,`icmpv6`]}}}},class:`NoReboot`}},{kind:`OOMConfig`,key:`oomConfig`,since:`v1.12`,schema:{type:`object`,props:{cgroupRankingExpression:{type:`string`,doc:`This expression defines how to rank cgroups for OOM handler.

The cgroup with the highest rank (score) will be evicted first.
The expression must evaluate to a double value.

This expression receives the following parameters:
- memory_max - Optional<uint> - in bytes
- memory_current - Optional<uint> - in bytes
- memory_peak - Optional<uint> - in bytes
- path - string, path to the cgroup
- class - int. This represents cgroup QoS class, and matches one of the constants, which are also provided: Besteffort, Burstable, Guaranteed, Podruntime, System

A CEL expression.`},sampleInterval:{type:`string`,doc:`How often should the trigger expression be evaluated.

This interval determines how often should the OOM controller
check for the OOM condition using the provided expression.
Adjusting it can help tune the reactivity of the OOM handler.

A duration such as 30s or 1h5m.`},strictCgroupClassOrdering:{type:`boolean`,doc:`Whether to enforce strict QoS class ordering when selecting an OOM victim.

When enabled (the default), cgroups in the lowest-importance QoS class are
killed first, and the ranking score only breaks ties within a class.
When disabled, the highest-scoring cgroup is killed regardless of class.`},triggerExpression:{type:`string`,doc:`This expression defines when to trigger OOM action.

The expression must evaluate to a boolean value.
If the expression returns true, then OOM ranking and killing will be handled.

This expression receives the following parameters:
- memory_{some,full}_{avg10,avg60,avg300,total} - double, representing PSI values
- time_since_trigger - duration since the last OOM handler trigger event

A CEL expression.`}},class:`NoReboot`}},{kind:`PCIDriverRebindConfig`,key:`pciDriverRebindConfig`,since:`v1.10`,schema:{type:`object`,props:{name:{type:`string`,doc:`PCI device id`},targetDriver:{type:`string`,doc:`Target driver to rebind the PCI device to.`}},class:`NoReboot`}},{kind:`RAIDArrayConfig`,key:`raidArrayConfig`,since:`v1.14`,schema:{type:`object`,props:{level:{type:`string`,doc:`RAID level.

The value is Talos's textual form of MDLevel.`,enum:[`raid1`]},metadata:{type:`string`,doc:`MD on-disk metadata format.

Defaults to 1.0, which stores the superblock at the end of the member
device so the array can back a bootable partition. Use 1.2 for data
arrays that do not need to be bootable.

The value is Talos's textual form of MDMetadata.`,enum:[`1.0`,`1.2`]},name:{type:`string`,doc:`Array name, stamped into the md metadata.

Must be 1-32 chars: ASCII letters, digits, hyphens, underscores.
Exposed as \`/dev/disk/by-id/md-name-<name>\`.`},provisioning:{type:`object`,doc:`The provisioning describes how the RAID arrays are provisioned.`,props:{volumeSelector:{type:`object`,doc:`The volume selector describes how the members of RAID arrays are selected.`,props:{match:{type:`string`,doc:`CEL expression matching the member volumes of the array.

Evaluated against each discovered volume with the \`volume\` variable;
the \`disk\` variable is bound for whole disks (empty for partitions), so
both whole disks and partitions can be selected. The system disk and
its partitions are never eligible.

A volume declared in the machine config also matches on \`volume_id\`,
the volume name prefixed by its kind (\`u-\` user, \`r-\` raw, \`s-\` swap),
as in \`volume_id == "r-mirror0"\`. A device Talos does not manage as a
volume has an empty \`volume_id\`.

An encrypted volume matches the same way. Talos builds the array on
the opened device, never on the ciphertext, and matches the volume
only after the volume manager has prepared it.

A CEL expression.`}}}}}},class:`NoReboot`}},{kind:`RawVolumeConfig`,key:`rawVolumeConfig`,since:`v1.11`,schema:{type:`object`,props:{encryption:{type:`object`,doc:`The encryption describes how the volume is encrypted.`,props:{allowDiscards:{type:`boolean`,doc:`>`},blockSize:{type:`integer`,doc:`>`,format:`int64`,min:0},cipher:{type:`string`,doc:`>`,enum:[`aes-xts-plain64`,`xchacha12,aes-adiantum-plain64`,`xchacha20,aes-adiantum-plain64`]},keySize:{type:`integer`,doc:`>`,min:0},keys:{type:`array`,doc:`>`,items:{type:`object`,props:{kms:{type:`object`,doc:`>`,props:{endpoint:{type:`string`,doc:`>`}}},lockToState:{type:`boolean`,doc:`>`},nodeID:{type:`object`,doc:`>`},slot:{type:`integer`,doc:`>`},static:{type:`object`,doc:`>`},tpm:{type:`object`,doc:`>`,props:{checkSecurebootStatusOnEnroll:{type:`boolean`,doc:`>`},options:{type:`object`,doc:`>`,props:{pcrs:{type:`array`,doc:`>`,items:{type:`integer`}}}}}}}}},options:{type:`array`,doc:`>`,items:{type:`string`}},provider:{type:`string`,doc:`>

The value is Talos's textual form of EncryptionProviderType.`,enum:[`luks2`]}}},name:{type:`string`,doc:`Name of the volume.

Name might be between 1 and 34 characters long and can only contain:
lowercase and uppercase ASCII letters, digits, and hyphens.`},provisioning:{type:`object`,doc:`The provisioning describes how the volume is provisioned.`,props:{diskSelector:{type:`object`,doc:`The disk selector expression.`,props:{match:{type:`string`,doc:`The Common Expression Language (CEL) expression to match the disk.

A CEL expression.`}}},grow:{type:`boolean`,doc:`Should the volume grow to the size of the disk (if possible).`},maxSize:{type:`string`,doc:`The maximum size of the volume, if not specified the volume can grow to the size of the
disk.

Size is specified in bytes or in percents. It can be expressed in human readable format, e.g. 100MB.

A size: a byte size such as 10GiB or a percentage such as 50%.`},minSize:{type:`string`,doc:`The minimum size of the volume.

Size is specified in bytes, but can be expressed in human readable format, e.g. 100MB.

A byte size: a number of bytes or a human-readable size such as 100MiB.`}}}},class:`NoReboot`}},{kind:`RegistryMirrorConfig`,key:`registryMirrorConfig`,since:`v1.12`,schema:{type:`object`,props:{endpoints:{type:`array`,doc:`List of mirror endpoints for the registry.
Mirrors will be used in the order they are specified,
falling back to the default registry is \`skipFallback\` is not set to true.`,items:{type:`object`,props:{overridePath:{type:`boolean`,doc:"Use endpoint path as supplied, without adding `/v2/` suffix."},url:{type:`string`,doc:`The URL of the registry mirror endpoint.

A URL.`}}}},name:{type:`string`,doc:`Registry name to apply the mirror configuration to.

Registry name is the first segment of image identifier, with 'docker.io'
being default one.

A special name '*' can be used to define mirror configuration
that applies to all registries.`},skipFallback:{type:`boolean`,doc:`Skip fallback to the original registry if none of the mirrors are available
or contain the requested image.`}},class:`NoReboot`}},{kind:`RegistryTLSConfig`,key:`registryTLSConfig`,since:`v1.12`,schema:{type:`object`,props:{ca:{type:`string`,doc:`CA registry certificate to add the list of trusted certificates.
Certificate should be PEM-encoded.`},clientIdentity:{type:`object`,doc:`Enable mutual TLS authentication with the registry.
Client certificate and key should be PEM-encoded.`,props:{cert:{type:`string`}}},insecureSkipVerify:{type:`boolean`,doc:`Skip TLS server certificate verification (not recommended).`},name:{type:`string`,doc:`Registry endpoint to apply the TLS configuration to.

Registry endpoint is the hostname part of the endpoint URL,
e.g. 'my-mirror.local:5000' for 'https://my-mirror.local:5000/v2/'.

The TLS configuration makes sense only for HTTPS endpoints.
The TLS configuration will apply to all image pulls for this
registry endpoint, by Talos or any Kubernetes workloads.`}},class:`NoReboot`}},{kind:`ResolverConfig`,key:`resolverConfig`,since:`v1.12`,schema:{type:`object`,props:{hostDNS:{type:`object`,doc:`Configuration for host DNS resolver.

This configures a local DNS caching resolver on the host to improve DNS resolution performance and reliability.`,props:{enabled:{type:`boolean`,doc:`Enable host DNS caching resolver.

When enabled, a local DNS caching resolver is deployed on the host to improve DNS resolution performance and reliability.
Upstream DNS servers for the host resolver are configured using the \`nameservers\` field in this config document.`},forwardKubeDNSToHost:{type:`boolean`,doc:`Use the host DNS resolver as upstream for Kubernetes CoreDNS pods.

When enabled, CoreDNS pods use host DNS server as the upstream DNS (instead of
using configured upstream DNS resolvers directly).`},resolveMemberNames:{type:`boolean`,doc:`Resolve member hostnames using the host DNS resolver.

When enabled, cluster member hostnames and node names are resolved using the host DNS resolver.
This requires service discovery to be enabled.`}}},nameservers:{type:`array`,doc:`A list of nameservers (DNS servers) to use for resolving domain names.

Nameservers are used to resolve domain names on the host, and they are also
propagated to Kubernetes DNS (CoreDNS) for use by pods running on the cluster.

This overrides any nameservers obtained via DHCP or platform configuration.
Default configuration is to use 1.1.1.1 and 8.8.8.8 as nameservers.`,items:{type:`object`,props:{address:{type:`string`,doc:`The IP address of the nameserver.

An IP address.`},protocol:{type:`string`,doc:`A DNS protocol to use.

The default protocol is plain DNS (\`Do53\`) (DNS over TCP/UDP). Set this to
\`DoT\` to use DNS over TLS (RFC 7858) on TCP port 853, or \`DoH\` to use DNS
over HTTPS (RFC 8484) on TCP port 443 with the \`/dns-query\` URL path. Both
\`DoT\` and \`DoH\` deliver encrypted queries to this nameserver.

Note: encrypted DNS protocols require a correct system clock to validate
certificates. If NTP is configured with hostnames that need to be resolved
through DoT/DoH, the boot may stall: NTP needs DNS, and TLS needs valid
time. Either rely on the hardware clock, configure NTP servers by IP, or
keep at least one plain-DNS fallback nameserver.

The value is Talos's textual form of DNSProtocol.`,enum:[`Do53`,`DoT`,`DoH`]},tlsServerName:{type:`string`,doc:"TLS server name to validate the nameserver certificate against.\n\nThis field should be set if the protocol is set to `DoT` or `DoH`.\nThe value is used both as the SNI sent during the TLS handshake and as the\nname verified against the server certificate. For `DoH`, it is also used as\nthe host portion of the request URL (`https://<tlsServerName>/dns-query`)\nwhile the connection itself is established to the configured `address`."}}}},searchDomains:{type:`object`,doc:`Configuration for search domains (in /etc/resolv.conf).

The default is to derive search domains from the hostname FQDN.`,props:{disableDefault:{type:`boolean`,doc:`Disable default search domain configuration from hostname FQDN.

When set to true, the system will not derive search domains from the hostname FQDN.
This allows for a custom configuration of search domains without any defaults.`},domains:{type:`array`,doc:`A list of search domains to be used for DNS resolution.

Search domains are appended to unqualified domain names during DNS resolution.
For example, if "example.com" is a search domain and a user tries to resolve
"host", the system will attempt to resolve "host.example.com".

If set, this overrides any search domains obtained via DHCP or platform configuration.
An empty list (\`domains: []\`) clears search domains obtained from DHCP or platform,
while leaving this field unset inherits them.
The default configuration derives the search domain from the hostname FQDN.`,items:{type:`string`}}}}},class:`NoReboot`}},{kind:`RoutingRuleConfig`,key:`routingRuleConfig`,since:`v1.13`,schema:{type:`object`,props:{action:{type:`string`,doc:`The action to perform when the rule matches.
Defaults to "unicast" (table lookup).

The value is Talos's textual form of RoutingRuleAction.`,enum:[`unicast`,`blackhole`,`unreachable`,`prohibit`]},dst:{type:`string`,doc:`Destination address prefix to match.
If empty, matches all destinations.

An IP prefix in CIDR notation.`},fwMark:{type:`integer`,doc:`Match packets with this firewall mark value.`,format:`int64`,min:0,max:4294967295},fwMask:{type:`integer`,doc:`Mask for the firewall mark comparison.`,format:`int64`,min:0,max:4294967295},iifName:{type:`string`,doc:`Match packets arriving on this interface.`},name:{type:`string`,doc:`Priority of the routing rule.
Lower values are matched first.
Must be between 1 and 32765 (excluding reserved priorities [0 32500 32501 32766 32767]).
Must be unique across all routing rules in the configuration.`},oifName:{type:`string`,doc:`Match packets going out on this interface.`},src:{type:`string`,doc:`Source address prefix to match.
If empty, matches all sources.

An IP prefix in CIDR notation.`},table:{type:`string`,doc:`The routing table to look up if the rule matches.

The value is Talos's textual form of RoutingTable.`}},class:`NoReboot`}},{kind:`SecurityProfileConfig`,key:`securityProfileConfig`,since:`v1.14`,schema:{type:`object`,props:{workloadIsolation:{type:`boolean`,doc:`Enable workload isolation (run the container plane inside the sandbox namespace).`}},class:`NoReboot`}},{kind:`StaticHostConfig`,key:`staticHostConfig`,since:`v1.12`,schema:{type:`object`,props:{hostnames:{type:`array`,doc:`List of hostnames to map to the IP address.`,items:{type:`string`}},name:{type:`string`,doc:`IP address (IPv4 or IPv6) to map the hostnames to.`}},class:`NoReboot`}},{kind:`SwapVolumeConfig`,key:`swapVolumeConfig`,since:`v1.11`,schema:{type:`object`,props:{encryption:{type:`object`,doc:`The encryption describes how the volume is encrypted.`,props:{allowDiscards:{type:`boolean`,doc:`>`},blockSize:{type:`integer`,doc:`>`,format:`int64`,min:0},cipher:{type:`string`,doc:`>`,enum:[`aes-xts-plain64`,`xchacha12,aes-adiantum-plain64`,`xchacha20,aes-adiantum-plain64`]},keySize:{type:`integer`,doc:`>`,min:0},keys:{type:`array`,doc:`>`,items:{type:`object`,props:{kms:{type:`object`,doc:`>`,props:{endpoint:{type:`string`,doc:`>`}}},lockToState:{type:`boolean`,doc:`>`},nodeID:{type:`object`,doc:`>`},slot:{type:`integer`,doc:`>`},static:{type:`object`,doc:`>`},tpm:{type:`object`,doc:`>`,props:{checkSecurebootStatusOnEnroll:{type:`boolean`,doc:`>`},options:{type:`object`,doc:`>`,props:{pcrs:{type:`array`,doc:`>`,items:{type:`integer`}}}}}}}}},options:{type:`array`,doc:`>`,items:{type:`string`}},provider:{type:`string`,doc:`>

The value is Talos's textual form of EncryptionProviderType.`,enum:[`luks2`]}}},name:{type:`string`,doc:`Name of the volume.

Name might be between 1 and 34 characters long and can only contain:
lowercase and uppercase ASCII letters, digits, and hyphens.`},provisioning:{type:`object`,doc:`The provisioning describes how the volume is provisioned.`,props:{diskSelector:{type:`object`,doc:`The disk selector expression.`,props:{match:{type:`string`,doc:`The Common Expression Language (CEL) expression to match the disk.

A CEL expression.`}}},grow:{type:`boolean`,doc:`Should the volume grow to the size of the disk (if possible).`},maxSize:{type:`string`,doc:`The maximum size of the volume, if not specified the volume can grow to the size of the
disk.

Size is specified in bytes or in percents. It can be expressed in human readable format, e.g. 100MB.

A size: a byte size such as 10GiB or a percentage such as 50%.`},minSize:{type:`string`,doc:`The minimum size of the volume.

Size is specified in bytes, but can be expressed in human readable format, e.g. 100MB.

A byte size: a number of bytes or a human-readable size such as 100MiB.`}}}},class:`NoReboot`}},{kind:`SysctlConfig`,key:`sysctlConfig`,since:`v1.14`,schema:{type:`object`,props:{params:{type:`map`,doc:`Used to configure the machine's sysctls (kernel parameters under \`/proc/sys\`).
Values from this document are merged with the deprecated v1alpha1 machine.sysctls values (if set),
with this document taking precedence on key conflicts.`,values:{type:`string`}}},class:`NoReboot`}},{kind:`SysfsConfig`,key:`sysfsConfig`,since:`v1.14`,schema:{type:`object`,props:{params:{type:`map`,doc:`Used to configure the machine's sysfs (kernel attributes under \`/sys\`).
Values from this document are merged with the deprecated v1alpha1 machine.sysfs values (if set),
with this document taking precedence on key conflicts.`,values:{type:`string`}}},class:`NoReboot`}},{kind:`TCPProbeConfig`,key:`tcpProbeConfig`,since:`v1.13`,schema:{type:`object`,props:{endpoint:{type:`string`,doc:`Endpoint to probe in the format host:port.`},failureThreshold:{type:`integer`,doc:`Number of consecutive failures for the probe to be considered failed after having succeeded.
Defaults to 0 (immediately fail on first failure).`},interval:{type:`string`,doc:`Interval between probe attempts.
Defaults to 1s.

A duration such as 30s or 1h5m.`},name:{type:`string`,doc:`Name of the probe.`},timeout:{type:`string`,doc:`Timeout for the probe.
Defaults to 10s.

A duration such as 30s or 1h5m.`}},class:`NoReboot`}},{kind:`TimeSyncConfig`,key:`timeSyncConfig`,since:`v1.12`,schema:{type:`object`,props:{bootTimeout:{type:`string`,doc:`Specifies the timeout when the node time is considered to be in sync unlocking the boot sequence.
NTP sync will be still running in the background.
Defaults to "infinity" (waiting forever for time sync)

A duration such as 30s or 1h5m.`},enabled:{type:`boolean`,doc:"Indicates if the time synchronization is enabled for the machine.\nDefaults to `true`."},ntp:{type:`object`,doc:`Specifies NTP configuration to sync the time over network.
Mutually exclusive with PTP configuration.`,props:{servers:{type:`array`,doc:"Specifies time (NTP) servers to use for setting the system time.\nDefaults to `time.cloudflare.com` when configuration is not provided.",items:{type:`string`}},useNTS:{type:`boolean`,doc:"Enables NTS (Network Time Security) for NTP queries.\nNTS provides authenticated and encrypted time synchronization using TLS.\nWhen enabled, all NTP capable servers must be specified as hostnames (not IP addresses).\nDefaults to `true` when configuration is not provided, using the system default server (`time.cloudflare.com`)."}}},ptp:{type:`object`,doc:`Specific PTP (Precision Time Protocol) configuration to sync the time over PTP devices.
Mutually exclusive with NTP configuration.`,props:{devices:{type:`array`,doc:`A list of PTP devices to sync with (e.g. provided by the hypervisor).

A PTP device is typically represented as a character device file in the /dev directory,
such as /dev/ptp0 or /dev/ptp_kvm. These devices are used to synchronize the system time
with an external time source that supports the Precision Time Protocol.`,items:{type:`string`}}}}},class:`NoReboot`}},{kind:`TrustedRootsConfig`,key:`trustedRootsConfig`,since:`v1.8`,schema:{type:`object`,props:{certificates:{type:`string`,doc:`List of additional trusted certificate authorities (as PEM-encoded certificates).

Multiple certificates can be provided in a single config document, separated by newline characters.`},name:{type:`string`,doc:`Name of the config document.`}},class:`NoReboot`,privileged:`it adds certificate authorities every TLS client of the node trusts (image pulls, manifests, discovery)`}},{kind:`UdevRulesConfig`,key:`udevRulesConfig`,since:`v1.14`,schema:{type:`object`,props:{rules:{type:`array`,doc:`Custom udev rules.`,items:{type:`string`}}},class:`NoReboot`}},{kind:`UserVolumeConfig`,key:`userVolumeConfig`,since:`v1.10`,schema:{type:`object`,props:{encryption:{type:`object`,doc:`The encryption describes how the volume is encrypted.`,props:{allowDiscards:{type:`boolean`,doc:`>`},blockSize:{type:`integer`,doc:`>`,format:`int64`,min:0},cipher:{type:`string`,doc:`>`,enum:[`aes-xts-plain64`,`xchacha12,aes-adiantum-plain64`,`xchacha20,aes-adiantum-plain64`]},keySize:{type:`integer`,doc:`>`,min:0},keys:{type:`array`,doc:`>`,items:{type:`object`,props:{kms:{type:`object`,doc:`>`,props:{endpoint:{type:`string`,doc:`>`}}},lockToState:{type:`boolean`,doc:`>`},nodeID:{type:`object`,doc:`>`},slot:{type:`integer`,doc:`>`},static:{type:`object`,doc:`>`},tpm:{type:`object`,doc:`>`,props:{checkSecurebootStatusOnEnroll:{type:`boolean`,doc:`>`},options:{type:`object`,doc:`>`,props:{pcrs:{type:`array`,doc:`>`,items:{type:`integer`}}}}}}}}},options:{type:`array`,doc:`>`,items:{type:`string`}},provider:{type:`string`,doc:`>

The value is Talos's textual form of EncryptionProviderType.`,enum:[`luks2`]}}},filesystem:{type:`object`,doc:`The filesystem describes how the volume is formatted.`,props:{projectQuotaSupport:{type:`boolean`,doc:`Enables project quota support, valid only for 'xfs' filesystem.

Note: changing this value might require a full remount of the filesystem.`},type:{type:`string`,doc:`Filesystem type. Default is \`xfs\`.

The value is Talos's textual form of FilesystemType.`,enum:[`ext4`,`xfs`,`btrfs`]},xfs:{type:`object`,doc:`XFS-specific filesystem options, valid only for 'xfs' filesystem.`,props:{minAllocationGroupSize:{type:`string`,doc:`The minimum size of an XFS allocation group.

On non-rotational devices \`mkfs.xfs\` sizes the allocation group count to the number of
CPUs, which on machines with many cores and a modest disk yields hundreds of tiny
allocation groups. Talos bounds the allocation group size from below to keep the geometry
sane; this option overrides that bound.

Set to zero to use the \`mkfs.xfs\` defaults unchanged.

Note: this only affects volumes at the time they are formatted.

Size is specified in bytes, but can be expressed in human readable format, e.g. 100MB.

A byte size: a number of bytes or a human-readable size such as 100MiB.`}}}}},mount:{type:`object`,doc:`The mount describes additional mount options.`,props:{disableAccessTime:{type:`boolean`,doc:`If true, disable file access time updates.`},secure:{type:`boolean`,doc:`Enable secure mount options (nosuid, nodev, noexec).

Defaults to true for better security.`}}},name:{type:`string`,doc:`Name of the volume.

Name might be between 1 and 34 characters long and can only contain:
lowercase and uppercase ASCII letters, digits, and hyphens.`},provisioning:{type:`object`,doc:`The provisioning describes how the volume is provisioned.`,props:{diskSelector:{type:`object`,doc:`The disk selector expression.`,props:{match:{type:`string`,doc:`The Common Expression Language (CEL) expression to match the disk.

A CEL expression.`}}},grow:{type:`boolean`,doc:`Should the volume grow to the size of the disk (if possible).`},maxSize:{type:`string`,doc:`The maximum size of the volume, if not specified the volume can grow to the size of the
disk.

Size is specified in bytes or in percents. It can be expressed in human readable format, e.g. 100MB.

A size: a byte size such as 10GiB or a percentage such as 50%.`},minSize:{type:`string`,doc:`The minimum size of the volume.

Size is specified in bytes, but can be expressed in human readable format, e.g. 100MB.

A byte size: a number of bytes or a human-readable size such as 100MiB.`}}},scrub:{type:`object`,doc:`The scrub describes the per-volume filesystem scrub configuration.`,props:{enabled:{type:`boolean`,doc:`Enable or disable scrubbing for this volume.

If not set, scrubbing is enabled by default when scrub section is present.`},interval:{type:`string`,doc:`The interval at which the volume is scrubbed, overriding the global scrub interval.

A duration such as 30s or 1h5m.`}}},trim:{type:`object`,doc:`The trim describes the per-volume filesystem trim (fstrim) configuration.`,props:{enabled:{type:`boolean`,doc:`Enable or disable trimming for this volume.

If not set, trimming is enabled when the global FilesystemTrimConfig is present.`},interval:{type:`string`,doc:`The interval at which the volume is trimmed, overriding the global trim interval.

A duration such as 30s or 1h5m.`}}},volumeType:{type:`string`,doc:`Volume type.

The value is Talos's textual form of VolumeType.`,enum:[`directory`,`disk`,`partition`]}},class:`NoReboot`}},{kind:`VLANConfig`,key:`vlanConfig`,since:`v1.12`,schema:{type:`object`,props:{addresses:{type:`array`,doc:`Configure addresses to be statically assigned to the link.`,items:{type:`object`,props:{address:{type:`string`,doc:`IP address to be assigned to the link.

This field must include the network prefix length (e.g. /24 for IPv4, /64 for IPv6).

An IP prefix in CIDR notation.`},routePriority:{type:`integer`,doc:`Configure the route priority (metric) for routes created for this address.

If not specified, the system default route priority will be used.`,format:`int64`,min:0,max:4294967295}}}},mtu:{type:`integer`,doc:`Configure LinkMTU (Maximum Transmission Unit) for the link.

If not specified, the system default LinkMTU will be used (usually 1500).`,format:`int64`,min:0,max:4294967295},multicast:{type:`boolean`,doc:`Set the multicast capability of the link.`},name:{type:`string`,doc:`Name of the VLAN link (interface) to be created.`},parent:{type:`string`,doc:`Name of the parent link (interface) on which the VLAN link will be created.
Link aliases can be used here as well.`},routes:{type:`array`,doc:`Configure routes to be statically created via the link.`,items:{type:`object`,props:{destination:{type:`string`,doc:`The route's destination as an address prefix.

If not specified, a default route will be created for the address family of the gateway.

An IP prefix in CIDR notation.`},gateway:{type:`string`,doc:`The route's gateway (if empty, creates link scope route).

An IP address.`},metric:{type:`integer`,doc:`The optional metric for the route.`,format:`int64`,min:0,max:4294967295},mtu:{type:`integer`,doc:`The optional MTU for the route.`,format:`int64`,min:0,max:4294967295},source:{type:`string`,doc:`The route's source address (optional).

An IP address.`},table:{type:`string`,doc:`The routing table to use for the route.

If not specified, the main routing table will be used.

The value is Talos's textual form of RoutingTable.`}}}},up:{type:`boolean`,doc:`Bring the link up or down.

If not specified, the link will be brought up.`},vlanID:{type:`integer`,doc:`VLAN ID to be used for the VLAN link.`,min:0,max:65535},vlanMode:{type:`string`,doc:`Set the VLAN mode to use.
If not set, defaults to '802.1q'.

The value is Talos's textual form of VLANProtocol.`,enum:[`802.1q`,`802.1ad`]}},class:`NoReboot`}},{kind:`VRFConfig`,key:`vrfConfig`,since:`v1.13`,schema:{type:`object`,props:{addresses:{type:`array`,doc:`Configure addresses to be statically assigned to the link.`,items:{type:`object`,props:{address:{type:`string`,doc:`IP address to be assigned to the link.

This field must include the network prefix length (e.g. /24 for IPv4, /64 for IPv6).

An IP prefix in CIDR notation.`},routePriority:{type:`integer`,doc:`Configure the route priority (metric) for routes created for this address.

If not specified, the system default route priority will be used.`,format:`int64`,min:0,max:4294967295}}}},hardwareAddr:{type:`string`,doc:`Override the hardware (MAC) address of the link.

The value is Talos's textual form of HardwareAddr.`},links:{type:`array`,doc:`Names of the links (interfaces) to be assigned to this vrf.
Link aliases can be used here as well.`,items:{type:`string`}},mtu:{type:`integer`,doc:`Configure LinkMTU (Maximum Transmission Unit) for the link.

If not specified, the system default LinkMTU will be used (usually 1500).`,format:`int64`,min:0,max:4294967295},multicast:{type:`boolean`,doc:`Set the multicast capability of the link.`},name:{type:`string`,doc:`Name of the vrf link (interface) to be created.`},routes:{type:`array`,doc:`Configure routes to be statically created via the link.`,items:{type:`object`,props:{destination:{type:`string`,doc:`The route's destination as an address prefix.

If not specified, a default route will be created for the address family of the gateway.

An IP prefix in CIDR notation.`},gateway:{type:`string`,doc:`The route's gateway (if empty, creates link scope route).

An IP address.`},metric:{type:`integer`,doc:`The optional metric for the route.`,format:`int64`,min:0,max:4294967295},mtu:{type:`integer`,doc:`The optional MTU for the route.`,format:`int64`,min:0,max:4294967295},source:{type:`string`,doc:`The route's source address (optional).

An IP address.`},table:{type:`string`,doc:`The routing table to use for the route.

If not specified, the main routing table will be used.

The value is Talos's textual form of RoutingTable.`}}}},table:{type:`string`,doc:`Routing table number to use for this vrf.

The value is Talos's textual form of RoutingTable.`},up:{type:`boolean`,doc:`Bring the link up or down.

If not specified, the link will be brought up.`}},class:`NoReboot`}},{kind:`VethConfig`,key:`vethConfig`,since:`v1.14`,schema:{type:`object`,props:{addresses:{type:`array`,doc:`Configure addresses to be statically assigned to the link.`,items:{type:`object`,props:{address:{type:`string`,doc:`IP address to be assigned to the link.

This field must include the network prefix length (e.g. /24 for IPv4, /64 for IPv6).

An IP prefix in CIDR notation.`},routePriority:{type:`integer`,doc:`Configure the route priority (metric) for routes created for this address.

If not specified, the system default route priority will be used.`,format:`int64`,min:0,max:4294967295}}}},mtu:{type:`integer`,doc:`Configure LinkMTU (Maximum Transmission Unit) for the link.

If not specified, the system default LinkMTU will be used (usually 1500).`,format:`int64`,min:0,max:4294967295},multicast:{type:`boolean`,doc:`Set the multicast capability of the link.`},name:{type:`string`,doc:`Name of this end of the veth pair.

This is a literal kernel interface name. Link aliases are not supported here because
the interface is created by this document rather than selected from existing physical links.`},peer:{type:`object`,doc:`Configuration for the peer end of the veth pair.`,props:{addresses:{type:`array`,doc:`Configure addresses to be statically assigned to the link.`,items:{type:`object`,props:{address:{type:`string`,doc:`IP address to be assigned to the link.

This field must include the network prefix length (e.g. /24 for IPv4, /64 for IPv6).

An IP prefix in CIDR notation.`},routePriority:{type:`integer`,doc:`Configure the route priority (metric) for routes created for this address.

If not specified, the system default route priority will be used.`,format:`int64`,min:0,max:4294967295}}}},mtu:{type:`integer`,doc:`Configure LinkMTU (Maximum Transmission Unit) for the link.

If not specified, the system default LinkMTU will be used (usually 1500).`,format:`int64`,min:0,max:4294967295},multicast:{type:`boolean`,doc:`Set the multicast capability of the link.`},name:{type:`string`,doc:`Name of the peer end of the veth pair.

This is a literal kernel interface name. Link aliases are not supported here because
the interface is created by this document rather than selected from existing physical links.

Both endpoints are created in the host network namespace. This name can be listed in a
VRFConfig document's \`links\` field to attach the peer endpoint to that VRF.`},routes:{type:`array`,doc:`Configure routes to be statically created via the link.`,items:{type:`object`,props:{destination:{type:`string`,doc:`The route's destination as an address prefix.

If not specified, a default route will be created for the address family of the gateway.

An IP prefix in CIDR notation.`},gateway:{type:`string`,doc:`The route's gateway (if empty, creates link scope route).

An IP address.`},metric:{type:`integer`,doc:`The optional metric for the route.`,format:`int64`,min:0,max:4294967295},mtu:{type:`integer`,doc:`The optional MTU for the route.`,format:`int64`,min:0,max:4294967295},source:{type:`string`,doc:`The route's source address (optional).

An IP address.`},table:{type:`string`,doc:`The routing table to use for the route.

If not specified, the main routing table will be used.

The value is Talos's textual form of RoutingTable.`}}}},up:{type:`boolean`,doc:`Bring the link up or down.

If not specified, the link will be brought up.`}}},routes:{type:`array`,doc:`Configure routes to be statically created via the link.`,items:{type:`object`,props:{destination:{type:`string`,doc:`The route's destination as an address prefix.

If not specified, a default route will be created for the address family of the gateway.

An IP prefix in CIDR notation.`},gateway:{type:`string`,doc:`The route's gateway (if empty, creates link scope route).

An IP address.`},metric:{type:`integer`,doc:`The optional metric for the route.`,format:`int64`,min:0,max:4294967295},mtu:{type:`integer`,doc:`The optional MTU for the route.`,format:`int64`,min:0,max:4294967295},source:{type:`string`,doc:`The route's source address (optional).

An IP address.`},table:{type:`string`,doc:`The routing table to use for the route.

If not specified, the main routing table will be used.

The value is Talos's textual form of RoutingTable.`}}}},up:{type:`boolean`,doc:`Bring the link up or down.

If not specified, the link will be brought up.`}},class:`NoReboot`}},{kind:`WatchdogTimerConfig`,key:`watchdogTimerConfig`,since:`v1.7`,schema:{type:`object`,props:{device:{type:`string`,doc:`Path to the watchdog device.`},timeout:{type:`string`,doc:`Timeout for the watchdog.

If Talos is unresponsive for this duration, the watchdog will reset the system.

Default value is 1 minute, minimum value is 10 seconds.

A duration such as 30s or 1h5m.`}},class:`NoReboot`}},{kind:`ZswapConfig`,key:`zswapConfig`,since:`v1.11`,schema:{type:`object`,props:{maxPoolPercent:{type:`integer`,doc:`The maximum percent of memory that zswap can use.
This is a percentage of the total system memory.
The value must be between 0 and 100.`},shrinkerEnabled:{type:`boolean`,doc:`Enable the shrinker feature: kernel might move
cold pages from zswap to swap device to free up memory
for other use cases.`}},class:`NoReboot`}}],t=`DiscoveryIdentityConfig:clusterSecret,HCloudVIPConfig:apiToken,KubeAPIServerCAConfig:issuingCA.key,KubeAggregatorCAConfig:issuingCA.key,KubeEtcdEncryptionConfig:config,KubeServiceAccountConfig:issuer.privateKey,RawVolumeConfig:encryption.keys[].static.passphrase,RegistryAuthConfig:auth,RegistryAuthConfig:identityToken,RegistryAuthConfig:password,RegistryTLSConfig:clientIdentity.key,SideroLinkConfig:uniqueToken,SwapVolumeConfig:encryption.keys[].static.passphrase,UserVolumeConfig:encryption.keys[].static.passphrase,VolumeConfig:encryption.keys[].static.passphrase,WireguardConfig:peers[].presharedKey,WireguardConfig:privateKey,v1alpha1:cluster.aescbcEncryptionSecret,v1alpha1:cluster.aggregatorCA.key,v1alpha1:cluster.ca.key,v1alpha1:cluster.etcd.ca.key,v1alpha1:cluster.secret,v1alpha1:cluster.secretboxEncryptionSecret,v1alpha1:cluster.serviceAccount.key,v1alpha1:cluster.token,v1alpha1:machine.ca.key,v1alpha1:machine.network.interfaces[].vip.equinixMetal.apiToken,v1alpha1:machine.network.interfaces[].vip.hcloud.apiToken,v1alpha1:machine.network.interfaces[].vlans[].vip.equinixMetal.apiToken,v1alpha1:machine.network.interfaces[].vlans[].vip.hcloud.apiToken,v1alpha1:machine.network.interfaces[].wireguard.privateKey,v1alpha1:machine.registries.config{*}.auth.auth,v1alpha1:machine.registries.config{*}.auth.identityToken,v1alpha1:machine.registries.config{*}.auth.password,v1alpha1:machine.registries.config{*}.tls.clientIdentity.key,v1alpha1:machine.systemDiskEncryption.ephemeral.keys[].static.passphrase,v1alpha1:machine.systemDiskEncryption.state.keys[].static.passphrase,v1alpha1:machine.token`.split(`,`),n={kinds:e,secretFields:t};export{n as default,e as kinds,t as secretFields};