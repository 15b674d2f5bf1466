package talosemu

// Strings used in several places.
const (
	nameTalos      = "talos"    // default cluster name, Talos's field manager
	nameTalosemu   = "talosemu" // product name, etcd cluster token
	hostLocalhost  = "localhost"
	groupMasters   = "system:masters"
	osLinux        = "linux"
	archAMD64      = "amd64"
	kubeconfigFile = "kubeconfig"

	argTrue  = "true"
	argFalse = "false"

	flagBindAddress = "bind-address"
	flagSecurePort  = "secure-port"
	flagCertDir     = "cert-dir"
	flagProfiling   = "profiling"
)
