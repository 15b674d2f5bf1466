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

// tlsSource returns the console's certificate choice and the OIDC listener's
// certificate (the Ichor leaf; nil without one). Both files of a pair are
// reloaded when they change. With neither pair (a local run, the demo) it
// serves a self-signed certificate made in memory, and no OIDC listener.
func tlsSource(ctx context.Context, f tlsFiles, log *slog.Logger) (console, oidc getCertificate, err error) {
	if (f.servingCert == "") != (f.servingKey == "") {
		return nil, nil, errors.New("--serving-cert-file and --serving-key-file go together (the Secret ichor-ui-tls, mounted)")
	}
	if (f.operatorCert == "") != (f.operatorKey == "") {
		return nil, nil, errors.New("--tls-cert-file and --tls-key-file go together (the operator's certificate, ichorUI.tls.secretName)")
	}
	if f.servingCert == "" && f.operatorCert == "" {
		cert, _, err := certs.SelfSigned([]string{"localhost", "127.0.0.1", "::1"}, 365*24*time.Hour)
		if err != nil {
			return nil, nil, err
		}
		log.Warn("no --serving-cert-file nor --tls-cert-file: serving a self-signed certificate")
		return func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }, nil, nil
	}
	sni := &certs.SNI{}
	if f.servingCert != "" {
		if sni.Service, err = certs.NewReloader(f.servingCert, f.servingKey, log); err != nil {
			return nil, nil, err
		}
		go sni.Service.Run(ctx, 10*time.Second)
		oidc = sni.Service.GetCertificate
	}
	if f.operatorCert != "" {
		if sni.Operator, err = certs.NewReloader(f.operatorCert, f.operatorKey, log); err != nil {
			return nil, nil, err
		}
		go sni.Operator.Run(ctx, 10*time.Second)
	}
	return sni.GetCertificate, oidc, nil
}
