// Wrapper module that pins the protoc plugins buf runs locally (the registry's
// remote plugins are unreachable): protoc-gen-go, protoc-gen-go-grpc,
// protoc-gen-grpc-gateway and protoc-gen-openapiv2. It stays outside go.work and
// apart from tools/buf, whose pre-release protobuf would otherwise raise
// protoc-gen-go's version; the Taskfile builds them with GOWORK=off (task tools:proto).
module github.com/maeshinshin/ichor/tools/protoc-gen

go 1.26.8

tool (
	github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway
	github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2
	google.golang.org/grpc/cmd/protoc-gen-go-grpc
	google.golang.org/protobuf/cmd/protoc-gen-go
)

require (
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.33.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20261026165753-2ffab32bce7e // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261019180522-ce908d29299b // indirect
	google.golang.org/grpc v1.84.0 // indirect
	google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
