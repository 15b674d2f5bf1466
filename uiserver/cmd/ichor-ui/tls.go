package main

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"time"

	"github.com/maeshinshin/ichor/uiserver/internal/certs"
)

// getCertificate is a tls.Config.GetCertificate.
type getCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error)

// tlsFiles are the certificate files ichor-ui serves.
type tlsFiles struct {
	// servingCert and servingKey are the Ichor leaf (the Secret ichor-ui-tls).
	servingCert, servingKey string
	// operatorCert and operatorKey are the operator's (ichorUI.tls.secretName).
	operatorCert, operatorKey string
}

// tlsCerts are the certificates ichor-ui serves: the console's choice and
// the OIDC listener's (the Ichor leaf; nil without one), with the reloaders
// of their files (nil for a pair not given), which main's loops run.
type tlsCerts struct {
	console, oidc     getCertificate
	service, operator *certs.Reloader
}

// tlsSource returns the certificates of the files. With neither pair (a
// local run, the demo) it serves a self-signed certificate made in memory,
// and no OIDC listener.
func tlsSource(f tlsFiles, log *slog.Logger) (*tlsCerts, error) {
	if (f.servingCert == "") != (f.servingKey == "") {
		return nil, errors.New("--serving-cert-file and --serving-key-file go together (the Secret ichor-ui-tls, mounted)")
	}
	if (f.operatorCert == "") != (f.operatorKey == "") {
		return nil, errors.New("--tls-cert-file and --tls-key-file go together (the operator's certificate, ichorUI.tls.secretName)")
	}
	if f.servingCert == "" && f.operatorCert == "" {
		cert, _, err := certs.SelfSigned([]string{"localhost", "127.0.0.1", "::1"}, 365*24*time.Hour)
		if err != nil {
			return nil, err
		}
		log.Warn("no --serving-cert-file nor --tls-cert-file: serving a self-signed certificate")
		return &tlsCerts{console: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }}, nil
	}
	sni := &certs.SNI{}
	out := &tlsCerts{}
	var err error
	if f.servingCert != "" {
		if sni.Service, err = certs.NewReloader(f.servingCert, f.servingKey, log); err != nil {
			return nil, err
		}
		out.service, out.oidc = sni.Service, sni.Service.GetCertificate
	}
	if f.operatorCert != "" {
		if sni.Operator, err = certs.NewReloader(f.operatorCert, f.operatorKey, log); err != nil {
			return nil, err
		}
		out.operator = sni.Operator
	}
	out.console = sni.GetCertificate
	return out, nil
}

// reloadLoop is the loop that reloads r's files when they change; nil
// without r.
func reloadLoop(r *certs.Reloader) func(ctx context.Context) error {
	if r == nil {
		return nil
	}
	return forever(func(ctx context.Context) { r.Run(ctx, 10*time.Second) })
}
