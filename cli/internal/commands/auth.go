package commands

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/oidclogin"
	"github.com/maeshinshin/ichor/cli/internal/secretstore"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

const (
	// cliBinary is the command the kubeconfig's exec plugin runs.
	cliBinary = "ichor"
	// kubeconfigUser names the kubeconfig's cluster, user and context.
	kubeconfigUser   = "ichor"
	flagIssuer       = "issuer"
	flagIssuerCAFile = "issuer-ca-file"
	// flagHeadless signs in on another device and types the code here.
	flagHeadless = "headless"
	// uiCAConfigMap is the public CA bundle of ichor-ui's serving certificate
	// (the controller's servingca keeper publishes it in Ichor's namespace).
	uiCAConfigMap = "ichor-ui-ca"
)

func authCommand() *cli.Command {
	issuerFlags := make([]cli.Flag, 0, 3)
	issuerFlags = append(issuerFlags,
		&cli.StringFlag{Name: flagIssuer, Required: true, Usage: "ichor-ui's issuer `URL` (the address `ichor init --ui-url` recorded)"},
		&cli.StringFlag{Name: flagIssuerCAFile, TakesFile: true, Usage: "PEM `FILE` of the CA that signs ichor-ui's certificate (default: the system's roots)"},
	)
	return &cli.Command{
		Name:   "auth",
		Usage:  "sign in to the cluster's Kubernetes API as one of Ichor's users, through ichor-ui's issuer",
		Action: unknownSubcommand,
		Commands: []*cli.Command{
			{
				Name: "token",
				Usage: "print an ID token as a client-go ExecCredential (the kubeconfig's exec plugin runs this): " +
					"the cached one, a refreshed one, or one from a sign-in in the browser",
				Flags: append(issuerFlags,
					&cli.BoolFlag{Name: "no-browser", Usage: "print the sign-in address without opening a browser"},
					&cli.BoolFlag{Name: flagHeadless, Usage: "sign in on another device (a terminal with no browser here): " +
						"open the printed address anywhere, sign in, and type the code the page shows"}),
				Action: authTokenRun,
			},
			{
				Name:   "logout",
				Usage:  "end the sign-in at the issuer (RFC 7009 revocation) and delete this machine's tokens",
				Flags:  issuerFlags,
				Action: authLogoutRun,
			},
			{
				Name: "kubeconfig",
				Usage: "write a kubeconfig for the current context's cluster that signs in with `ichor auth token` " +
					"(it holds no secret: the tokens stay in ~/.ichor/tokens)",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: flagIssuer, Usage: "ichor-ui's issuer `URL` (default: the address `ichor init --ui-url` recorded)"},
					&cli.StringFlag{Name: flagIssuerCAFile, TakesFile: true, Usage: "PEM `FILE` of the CA that signs ichor-ui's certificate (default: the " + uiCAConfigMap + " ConfigMap Ichor publishes)"},
					&cli.StringFlag{Name: "install-namespace", Value: "ichor-system", Usage: "`NAMESPACE` Ichor is installed in"},
					&cli.StringFlag{Name: "user", Value: kubeconfigUser, Usage: "`NAME` of the kubeconfig's user and context"},
					&cli.StringFlag{Name: "file", TakesFile: true, Usage: "write the kubeconfig to `FILE` (0600) instead of standard output"},
					&cli.BoolFlag{Name: flagHeadless, Usage: "the exec plugin signs in on another device (`ichor auth token --headless`)"},
				},
				Action: authKubeconfigRun,
			},
		},
	}
}

// login is the issuer's sign-in as the flags name it.
func login(cmd *cli.Command) (*oidclogin.Options, error) {
	issuer := cmd.String(flagIssuer)
	if err := install.CheckUIURL(issuer); err != nil {
		return nil, fmt.Errorf("--%s %w", flagIssuer, err)
	}
	hc, err := issuerHTTP(cmd.String(flagIssuerCAFile))
	if err != nil {
		return nil, err
	}
	home, err := secretstore.Home()
	if err != nil {
		return nil, err
	}
	o := &oidclogin.Options{Issuer: issuer, HTTP: hc, CacheDir: filepath.Join(home, "tokens"), Prompt: cmd.Root().ErrWriter}
	switch {
	case cmd.Bool(flagHeadless):
		// kubectl hands an interactive exec plugin the terminal's standard input
		o.Code = os.Stdin
	case !cmd.Bool("no-browser"):
		o.Open = openBrowser
	}
	return o, nil
}

// issuerHTTP is a client that trusts the CA in caFile, or the system's roots.
func issuerHTTP(caFile string) (*http.Client, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", flagIssuerCAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--%s %s holds no PEM certificate", flagIssuerCAFile, caFile)
		}
		tlsCfg.RootCAs = pool
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment}}, nil
}

// openBrowser opens u in the desktop's browser.
func openBrowser(u string) error {
	var c *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		c = exec.CommandContext(context.Background(), "open", u) //nolint:gosec // G204: the issuer's authorization URL, opened as the user asked
	case "windows":
		c = exec.CommandContext(context.Background(), "rundll32", "url.dll,FileProtocolHandler", u) //nolint:gosec // G204: as above
	default:
		if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
			return errors.New("no graphical session")
		}
		c = exec.CommandContext(context.Background(), "xdg-open", u) //nolint:gosec // G204: as above
	}
	return c.Start()
}

func authTokenRun(ctx context.Context, cmd *cli.Command) error {
	o, err := login(cmd)
	if err != nil {
		return err
	}
	tok, exp, err := o.Token(ctx)
	if err != nil {
		return err
	}
	cred := clientauthv1.ExecCredential{
		TypeMeta: metav1.TypeMeta{APIVersion: clientauthv1.SchemeGroupVersion.String(), Kind: "ExecCredential"},
		Status:   &clientauthv1.ExecCredentialStatus{Token: tok, ExpirationTimestamp: &metav1.Time{Time: exp}},
	}
	return json.NewEncoder(cmd.Root().Writer).Encode(cred)
}

func authLogoutRun(ctx context.Context, cmd *cli.Command) error {
	o, err := login(cmd)
	if err != nil {
		return err
	}
	switch err := o.Logout(ctx); {
	case errors.Is(err, oidclogin.ErrNotSignedIn):
		_, _ = fmt.Fprintf(cmd.Root().Writer, "Not signed in to %s on this machine.\n", o.Issuer)
		return nil
	case err != nil:
		return err
	}
	_, _ = fmt.Fprintf(cmd.Root().Writer, "Signed out of %s.\n", o.Issuer)
	return nil
}

func authKubeconfigRun(ctx context.Context, cmd *cli.Command) error {
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	issuer := cmd.String(flagIssuer)
	if issuer == "" {
		if issuer, err = r.recordedUIURL(ctx); err != nil {
			return err
		}
		if issuer == "" {
			return errors.New("sign-in to Ichor is not on (no ichor-ui URL is recorded on the IchorInstallation): give --issuer, or install with `ichor init --ui-url URL`")
		}
	}
	if err := install.CheckUIURL(issuer); err != nil {
		return fmt.Errorf("the issuer %w", err)
	}
	caFile := cmd.String(flagIssuerCAFile)
	if caFile == "" {
		if caFile, err = r.saveIssuerCA(ctx, cmd.String("install-namespace"), issuer); err != nil {
			return err
		}
	}
	args := []string{"auth", "token", "--" + flagIssuer, issuer}
	if cmd.Bool(flagHeadless) {
		args = append(args, "--"+flagHeadless)
	}
	if caFile != "" {
		abs, err := filepath.Abs(caFile)
		if err != nil {
			return err
		}
		args = append(args, "--"+flagIssuerCAFile, abs)
	}
	cfg := r.conn.Config
	name := cmd.String("user")
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, TLSServerName: cfg.ServerName}
	if len(cfg.CAData) == 0 && cfg.CAFile != "" {
		kc.Clusters[name].CertificateAuthority = cfg.CAFile
	}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
		APIVersion: clientauthv1.SchemeGroupVersion.String(), Command: cliBinary, Args: args,
		InteractiveMode: clientcmdapi.IfAvailableExecInteractiveMode,
		InstallHint:     "ichor is Ichor's CLI: install it and put it on PATH",
	}}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	b, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	if f := cmd.String("file"); f != "" {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return err
		}
		r.printf("Wrote %s: `kubectl --kubeconfig %s get talosmachines` signs in through %s.\n", f, f, issuer)
		return nil
	}
	_, err = r.out.Write(b)
	return err
}

// saveIssuerCA writes the CA bundle Ichor publishes for ichor-ui into
// ~/.ichor/issuers/<hash of the issuer>/ca.crt and returns its path; "" when
// it is not published (ichor-ui then serves a certificate of the system's
// roots: `--issuer-ca-file` names another).
func (r *run) saveIssuerCA(ctx context.Context, namespace, issuer string) (string, error) {
	cm := &corev1.ConfigMap{}
	err := r.c().Get(ctx, client.ObjectKey{Namespace: namespace, Name: uiCAConfigMap}, cm)
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("%w (give --%s FILE with ichor-ui's CA instead)", r.conn.Explain(err, "reading ConfigMap "+namespace+"/"+uiCAConfigMap), flagIssuerCAFile)
	}
	pem := cm.Data["ca.crt"]
	if strings.TrimSpace(pem) == "" {
		return "", nil
	}
	home, err := secretstore.Home()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(strings.TrimSuffix(issuer, "/")))
	dir := filepath.Join(home, "issuers", hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	p := filepath.Join(dir, "ca.crt")
	return p, os.WriteFile(p, []byte(pem), 0o600)
}
