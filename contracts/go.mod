module github.com/maeshinshin/ichor/contracts

go 1.26.8

require github.com/siderolabs/talos/pkg/machinery v1.14.1

require (
	github.com/blang/semver/v4 v4.0.0 // indirect
	github.com/containerd/go-cni v1.1.13 // indirect
	github.com/containernetworking/cni v1.3.0 // indirect
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/petermattis/goid v0.0.0-20260713124913-97594f28f5ca // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20260702190614-8ae5a48058df // indirect
	github.com/sasha-s/go-deadlock v0.3.9 // indirect
	github.com/siderolabs/crypto v0.6.5 // indirect
	github.com/siderolabs/gen v0.8.8 // indirect
	golang.org/x/net v0.58.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260810153831-ec0a7760b754 // indirect
	google.golang.org/grpc v1.83.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// machinery v1.14.1 names two versions the module proxy refuses (403); these are
// the nearest served versions that compile all of machinery (DESIGN.md §2).
replace (
	github.com/cosi-project/runtime => github.com/cosi-project/runtime v1.16.2
	github.com/jsimonetti/rtnetlink/v2 => github.com/jsimonetti/rtnetlink/v2 v2.3.0
)
