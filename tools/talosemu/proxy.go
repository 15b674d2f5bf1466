package talosemu

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// apid's request routing. A Talos node's apid answers a request itself, or forwards it to
// the nodes named in the `node` (one) or `nodes` (many, deprecated) gRPC metadata, calling
// them with its own client certificate and the caller's roles in the metadata. The emulator
// does the same in front of each machine's handlers. Behaviour mirrored:
//
//   - t:internal/app/apid/pkg/director/director.go (Router.Director): which requests are
//     forwarded, to whom, and what is refused;
//   - t:internal/app/apid/pkg/backend/apid.go (APID.GetConnection, AppendInfo, BuildError):
//     the metadata sent along, and how one-to-many replies carry metadata.hostname/error;
//   - github.com/siderolabs/grpc-proxy proxy/handler_one2many.go: unary replies are merged
//     into one response, streamed replies are interleaved, a node's failure becomes one
//     message with its error while the others answer;
//   - t:pkg/grpc/middleware/authz/injector.go: the receiving node trusts the roles in the
//     metadata only from a certificate with the os:impersonator role.

// routeMode says how a request is served.
type routeMode int

const (
	routeLocal routeMode = iota
	routeOne2One
	routeOne2Many
)

// mdProxyFrom marks a request forwarded by another apid; it is never forwarded again.
const mdProxyFrom = "proxyfrom"

// director decides where a request goes (t:…/apid/pkg/director/director.go Director).
func (m *Machine) director(ctx context.Context, method string) (routeMode, []string, error) {
	// maintenance mode runs apid with NodeRoutingDisabled: every request is answered locally,
	// whatever its metadata (t:internal/app/machined/pkg/controllers/runtime/api_service_config.go)
	if m.inMaintenance() {
		return routeLocal, nil, nil
	}

	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return routeLocal, nil, nil
	}

	if _, forwarded := md[mdProxyFrom]; forwarded {
		return routeLocal, nil, nil
	}

	nodes, okNodes := md["nodes"]
	node, okNode := md["node"]

	if okNode && len(node) != 1 {
		return routeLocal, nil, status.Error(codes.InvalidArgument, "node metadata must be single-valued")
	}

	canForward := m.canForward()

	// a node without a client certificate (a worker) answers requests for itself and refuses
	// the rest
	if !canForward {
		if okNode && m.isLocalTarget(node[0]) {
			okNode = false
		}

		if okNodes && len(nodes) == 1 && m.isLocalTarget(nodes[0]) {
			okNodes = false
		}
	}

	switch {
	case okNodes:
		if !one2ManyAllowed(method) {
			return routeLocal, nil, status.Errorf(codes.InvalidArgument, "one-2-many proxying is not supported for method %s", method)
		}

		if !canForward {
			return routeLocal, nil, status.Error(codes.PermissionDenied, "no request forwarding")
		}

		for _, t := range nodes {
			if err := validTarget(t); err != nil {
				return routeLocal, nil, err
			}
		}

		return routeOne2Many, nodes, nil
	case okNode:
		if !canForward {
			return routeLocal, nil, status.Error(codes.PermissionDenied, "no request forwarding")
		}

		if err := validTarget(node[0]); err != nil {
			return routeLocal, nil, err
		}

		// a control plane forwards even a request for itself: it calls its own apid
		return routeOne2One, node, nil
	default:
		return routeLocal, nil, nil
	}
}

// one2ManyAllowed is the explicit list of services apid fans out (director.go).
func one2ManyAllowed(method string) bool {
	for _, prefix := range []string{
		"/machine.MachineService/", "/cluster.ClusterService/", "/inspect.InspectService/",
		"/storage.StorageService/", "/time.TimeService/",
	} {
		if strings.HasPrefix(method, prefix) {
			return true
		}
	}

	return false
}

// validTarget mirrors NewAPID's check: an empty target or one with a port is refused
// (t:…/apid/pkg/backend/apid.go; the error surfaces as Internal from the director).
func validTarget(target string) error {
	bad := target == ""

	if !bad {
		if _, _, err := net.SplitHostPort(target); err == nil {
			bad = true
		}
	}

	if bad {
		return status.Error(codes.Internal, fmt.Sprintf("invalid target %q", target))
	}

	return nil
}

func (m *Machine) canForward() bool {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.proxyCert != nil
}

// isLocalTarget: the node's current addresses and its hostname (t:…/director/local_address.go).
func (m *Machine) isLocalTarget(target string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()

	return target == m.p.Hardware.Address || target == m.hostnameLocked()
}

// forwardConn dials target's apid with this node's client certificate, verifying the target
// against the node's accepted CAs (t:…/apid/pkg/provider/provider.go ClientConfig). The
// target is an address or a hostname; the emulator resolves both against the world's machines
// (each may listen on its own port) and falls back to target:50000.
func (m *Machine) forwardConn(target string) (*grpc.ClientConn, error) {
	m.mu.Lock()
	cert, pool := m.proxyCert, m.clientCAs
	m.mu.Unlock()

	if cert == nil {
		return nil, status.Error(codes.PermissionDenied, "no request forwarding")
	}

	addr := m.world.resolveTarget(target)

	tlsConf := &tls.Config{
		Certificates: []tls.Certificate{*cert},
		RootCAs:      pool,
		MinVersion:   tls.VersionTLS12,
	}

	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(credentials.NewTLS(tlsConf)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(constants.GRPCMaxMessageSize)),
	)
}

// resolveTarget maps a node name from the metadata to host:port.
func (w *World) resolveTarget(target string) string {
	for _, m := range w.machines {
		if m.IP() == target {
			return m.Address()
		}
	}

	for _, m := range w.machines {
		m.mu.Lock()
		h := m.hostnameLocked()
		m.mu.Unlock()

		if h == target {
			return m.Address()
		}
	}

	return net.JoinHostPort(target, strconv.Itoa(constants.ApidPort))
}

// forwardContext builds the outgoing metadata: the caller's metadata without the routing
// keys, the caller's roles, and proxyfrom set to the authority the caller used
// (t:…/apid/pkg/backend/apid.go GetConnection).
func forwardContext(ctx context.Context, roles role.Set) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()

	md.Set(constants.APIAuthzRoleMetadataKey, roles.Strings()...)

	if authority := md[":authority"]; len(authority) > 0 {
		md.Set(mdProxyFrom, authority...)
	} else {
		md.Set(mdProxyFrom, "unknown")
	}

	delete(md, ":authority")
	delete(md, "nodes")
	delete(md, "node")

	// transport headers the client sets itself
	delete(md, "content-type")
	delete(md, "user-agent")

	return metadata.NewOutgoingContext(ctx, md)
}

// methodMessages returns new request and reply messages of a full method name.
func methodMessages(method string) (protoreflect.MethodDescriptor, error) {
	name := protoreflect.FullName(strings.ReplaceAll(strings.TrimPrefix(method, "/"), "/", "."))

	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}

	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}

	return md, nil
}

func newMessage(d protoreflect.MessageDescriptor) (proto.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "unknown message %s", d.FullName())
	}

	return mt.New().Interface(), nil
}

// proxyUnary forwards a unary call. One-to-one returns the target's reply (or error) as is;
// one-to-many merges the replies' messages, each with metadata.hostname set to its target,
// and turns a target's error into one message carrying only metadata{hostname, error,
// status}.
func (m *Machine) proxyUnary(ctx context.Context, method string, req any, mode routeMode, targets []string) (any, error) {
	md, err := methodMessages(method)
	if err != nil {
		return nil, err
	}

	outCtx := forwardContext(ctx, m.callerRoles(ctx))
	m.countForward(method, len(targets))

	call := func(target string) (proto.Message, metadata.MD, error) {
		reply, err := newMessage(md.Output())
		if err != nil {
			return nil, nil, err
		}

		conn, err := m.forwardConn(target)
		if err != nil {
			return nil, nil, err
		}
		defer conn.Close() //nolint:errcheck

		var header metadata.MD

		err = conn.Invoke(outCtx, method, req, reply, grpc.Header(&header))

		return reply, header, err
	}

	if mode == routeOne2One {
		reply, header, err := call(targets[0])
		if header != nil {
			_ = grpc.SetHeader(ctx, header)
		}

		if err != nil {
			return nil, err
		}

		return reply, nil
	}

	type result struct {
		reply proto.Message
		err   error
	}

	results := make([]result, len(targets))

	var wg sync.WaitGroup

	for i, target := range targets {
		wg.Add(1)

		go func() {
			defer wg.Done()

			reply, _, err := call(target)
			results[i] = result{reply, err}
		}()
	}

	wg.Wait()

	merged, err := newMessage(md.Output())
	if err != nil {
		return nil, err
	}

	list, elem, err := messagesField(merged)
	if err != nil {
		return nil, err
	}

	// grpc-proxy merges in arrival order; the emulator keeps the order of the targets
	for i, r := range results {
		if r.err != nil {
			item := merged.ProtoReflect().NewField(list).List().NewElement().Message()
			setMetadata(item, elem, targets[i], r.err)
			merged.ProtoReflect().Mutable(list).List().Append(protoreflect.ValueOfMessage(item))

			continue
		}

		items := r.reply.ProtoReflect().Get(list).List()
		for j := range items.Len() {
			item := items.Get(j).Message()
			setMetadata(item, elem, targets[i], nil)
			merged.ProtoReflect().Mutable(list).List().Append(protoreflect.ValueOfMessage(item))
		}
	}

	return merged, nil
}

// messagesField checks the shape every one-to-many reply has (AppendInfo's comment):
// `repeated SomeReply messages = 1` whose `common.Metadata metadata = 1`.
func messagesField(reply proto.Message) (protoreflect.FieldDescriptor, protoreflect.FieldDescriptor, error) {
	list := reply.ProtoReflect().Descriptor().Fields().ByNumber(1)
	if list == nil || !list.IsList() || list.Message() == nil {
		return nil, nil, status.Errorf(codes.Internal, "unexpected message format: %s", reply.ProtoReflect().Descriptor().FullName())
	}

	meta := metadataField(list.Message())
	if meta == nil {
		return nil, nil, status.Errorf(codes.Internal, "unexpected message format: %s", list.Message().FullName())
	}

	return list, meta, nil
}

func metadataField(d protoreflect.MessageDescriptor) protoreflect.FieldDescriptor {
	f := d.Fields().ByNumber(1)
	if f == nil || f.IsList() || f.Message() == nil || f.Message().FullName() != (&common.Metadata{}).ProtoReflect().Descriptor().FullName() { //nolint:staticcheck // the message apid still fills
		return nil
	}

	return f
}

// setMetadata merges {hostname: target} (and the error, when there is one) into the message's
// metadata, as appending an encoded Empty{metadata} to the wire message does.
func setMetadata(msg protoreflect.Message, field protoreflect.FieldDescriptor, target string, err error) {
	meta := &common.Metadata{} //nolint:staticcheck // the message apid still fills
	if msg.Has(field) {
		proto.Merge(meta, msg.Get(field).Message().Interface())
	}

	meta.Hostname = target //nolint:staticcheck // the field Talos still fills

	if err != nil {
		meta.Error = err.Error()                  //nolint:staticcheck // the field Talos still fills
		meta.Status = status.Convert(err).Proto() //nolint:staticcheck // the field Talos still fills
	}

	msg.Set(field, protoreflect.ValueOfMessage(meta.ProtoReflect()))
}

// proxyStream forwards a streaming call. One-to-one relays messages both ways and ends with
// the target's status; one-to-many sends the request to every target and interleaves their
// messages, each with metadata.hostname, a target's failure becoming one message with
// metadata.error.
func (m *Machine) proxyStream(ss grpc.ServerStream, method string, mode routeMode, targets []string) error {
	md, err := methodMessages(method)
	if err != nil {
		return err
	}

	ctx := ss.Context()
	outCtx := forwardContext(ctx, m.callerRoles(ctx))
	desc := &grpc.StreamDesc{ServerStreams: md.IsStreamingServer(), ClientStreams: md.IsStreamingClient()}

	m.countForward(method, len(targets))

	type backend struct {
		target string
		conn   *grpc.ClientConn
		cs     grpc.ClientStream
		err    error
	}

	backends := make([]*backend, len(targets))

	for i, target := range targets {
		b := &backend{target: target}
		backends[i] = b

		b.conn, b.err = m.forwardConn(target)
		if b.err != nil {
			continue
		}

		b.cs, b.err = b.conn.NewStream(outCtx, desc, method)
	}

	defer func() {
		for _, b := range backends {
			if b.conn != nil {
				_ = b.conn.Close()
			}
		}
	}()

	if mode == routeOne2One && backends[0].err != nil {
		return backends[0].err
	}

	// client → targets
	go func() {
		for {
			in, err := newMessage(md.Input())
			if err != nil {
				return
			}

			if err := ss.RecvMsg(in); err != nil {
				for _, b := range backends {
					if b.cs != nil && b.err == nil {
						_ = b.cs.CloseSend()
					}
				}

				return
			}

			for _, b := range backends {
				if b.cs != nil && b.err == nil {
					_ = b.cs.SendMsg(in)
				}
			}
		}
	}()

	if mode == routeOne2One {
		b := backends[0]

		for first := true; ; first = false {
			out, err := newMessage(md.Output())
			if err != nil {
				return err
			}

			if err := b.cs.RecvMsg(out); err != nil {
				if first {
					if h, herr := b.cs.Header(); herr == nil {
						_ = ss.SetHeader(h)
					}
				}

				ss.SetTrailer(b.cs.Trailer())

				if errors.Is(err, io.EOF) {
					return nil
				}

				return err
			}

			if first {
				if h, herr := b.cs.Header(); herr == nil {
					_ = ss.SetHeader(h)
				}
			}

			if err := ss.SendMsg(out); err != nil {
				return err
			}
		}
	}

	var (
		sendMu sync.Mutex
		wg     sync.WaitGroup
	)

	meta := metadataField(md.Output())

	send := func(msg proto.Message, target string, err error) {
		if meta != nil {
			setMetadata(msg.ProtoReflect(), meta, target, err)
		}

		sendMu.Lock()
		defer sendMu.Unlock()

		_ = ss.SendMsg(msg)
	}

	sendErr := func(target string, err error) {
		msg, nerr := newMessage(md.Output())
		if nerr != nil || meta == nil {
			return
		}

		send(msg, target, err)
	}

	for _, b := range backends {
		wg.Add(1)

		go func() {
			defer wg.Done()

			if b.err != nil {
				sendErr(b.target, b.err)

				return
			}

			for {
				out, err := newMessage(md.Output())
				if err != nil {
					return
				}

				if err := b.cs.RecvMsg(out); err != nil {
					if !errors.Is(err, io.EOF) {
						sendErr(b.target, err)
					}

					return
				}

				send(out, b.target, nil)
			}
		}()
	}

	wg.Wait()

	return nil
}
