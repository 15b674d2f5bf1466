// Command podapp is what TestPodRunner runs as an Ichor image's binary: it logs what the pod
// runner gave it (its address, a mounted ConfigMap, its identity against the API server, what
// its ServiceAccount may read), serves a readiness endpoint that opens when the ConfigMap
// podapp-gate says so, a greeting for port-forwards and a validating admission webhook, exits
// with $EXIT_CODE when that is set, and exits 0 on SIGTERM.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
)

func main() {
	listen := flag.String("listen", ":8080", "HTTP address")
	config := flag.String("config", "", "file to log")
	webhook := flag.String("webhook-listen", "", "HTTPS address of the webhook")
	tlsDir := flag.String("tls-dir", "", "directory with tls.crt and tls.key")
	flag.Parse()

	pod, ns := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	fmt.Printf("podapp: started pod=%s ip=%s listen=%s\n", pod, os.Getenv("POD_IP"), *listen)

	if *config != "" {
		b, err := os.ReadFile(*config)
		fmt.Printf("podapp: config=%s err=%v\n", b, err)
	}

	// the in-cluster configuration, as Ichor's binaries load it
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Println("podapp: no config:", err)
		os.Exit(2)
	}

	kube := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()

	if r, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil {
		fmt.Printf("podapp: user=%s\n", r.Status.UserInfo.Username)
	} else {
		fmt.Println("podapp: self subject review:", err)
	}

	_, err = kube.CoreV1().Secrets(ns).Get(ctx, "podapp-forbidden", metav1.GetOptions{})
	fmt.Printf("podapp: secrets forbidden=%v\n", apierrors.IsForbidden(err))

	if code := os.Getenv("EXIT_CODE"); code != "" {
		n, _ := strconv.Atoi(code)
		fmt.Printf("podapp: exiting with %d\n", n)
		os.Exit(n)
	}

	var closedLogged atomic.Bool

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	mux.HandleFunc("/hello", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "hello from %s", pod) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		gate, err := kube.CoreV1().ConfigMaps(ns).Get(r.Context(), "podapp-gate", metav1.GetOptions{})
		if err != nil || gate.Data["open"] != "yes" {
			if !closedLogged.Swap(true) {
				fmt.Printf("podapp: readyz: closed (%v)\n", err)
			}

			http.Error(w, "closed", http.StatusServiceUnavailable)

			return
		}

		fmt.Fprint(w, "ok")
	})

	go func() {
		srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		fmt.Println("podapp: serve:", srv.ListenAndServe())
		os.Exit(3)
	}()

	if *webhook != "" {
		go serveWebhook(*webhook, *tlsDir)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	fmt.Println("podapp: SIGTERM")
	os.Exit(0)
}

// serveWebhook refuses ConfigMaps named refuse-me.
func serveWebhook(addr, dir string) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		fmt.Println("podapp: webhook certificate:", err)
		os.Exit(4)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/validate", func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)

			return
		}

		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: review.Request.Name != "refuse-me"}
		if !resp.Allowed {
			resp.Result = &metav1.Status{Message: "podapp says no"}
		}

		fmt.Printf("podapp: webhook %s allowed=%v\n", review.Request.Name, resp.Allowed)

		review.Response, review.Request = resp, nil
		_ = json.NewEncoder(w).Encode(review)
	})

	srv := &http.Server{
		Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	fmt.Println("podapp: webhook:", srv.ListenAndServeTLS("", ""))
	os.Exit(5)
}
