package talos

import (
	"sync"

	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc"
)

// Interceptors are gRPC client interceptors every connection this package
// dials (Dialer.Dial, DialWithCertificate, DialTalosconfig, DialMaintenance)
// runs its calls through: the controller registers its RPC metrics here once,
// at start (SetInterceptors), so that every Talos call of every reconciler is
// measured without each one wrapping its client. The COSI state calls share
// the connection (machinery's client builds c.COSI on it), so they are
// measured too.
type Interceptors struct {
	Unary  grpc.UnaryClientInterceptor
	Stream grpc.StreamClientInterceptor
}

var (
	interceptorsMu sync.RWMutex
	interceptors   Interceptors
)

// SetInterceptors installs the interceptors for the connections dialed from
// now on; the zero value removes them. A process calls it once, before it
// dials (the controller's main, a test).
func SetInterceptors(i Interceptors) {
	interceptorsMu.Lock()
	defer interceptorsMu.Unlock()

	interceptors = i
}

// dialOptions are the machinery client options that carry the installed
// interceptors; none when there are none.
func dialOptions() []talosclient.OptionFunc {
	interceptorsMu.RLock()
	i := interceptors
	interceptorsMu.RUnlock()

	var opts []grpc.DialOption
	if i.Unary != nil {
		opts = append(opts, grpc.WithChainUnaryInterceptor(i.Unary))
	}

	if i.Stream != nil {
		opts = append(opts, grpc.WithChainStreamInterceptor(i.Stream))
	}

	if len(opts) == 0 {
		return nil
	}

	return []talosclient.OptionFunc{talosclient.WithGRPCDialOptions(opts...)}
}
