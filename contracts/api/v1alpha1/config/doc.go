// Package config holds the mirror types of the Talos configuration documents:
// one Go type per document kind that Talos machinery registers, with JSON
// tags, kubebuilder markers and the field documentation of machinery itself.
//
// The types are generated from machinery by tools/cmd/mirrorgen (machinery
// is YAML-first, carries no JSON tags and has field types without exported
// fields, so controller-gen cannot take it directly). Machinery stays the only
// catalogue of fields; the conversions both ways are in the convert
// subpackage, which is the only place that imports machinery, so a consumer
// of the CRD types never pulls machinery in.
//
// What the mirror leaves out, and why, is listed in SecretFields (Talos's own
// definition of secret material, dropped unconditionally), SharedSecretFields
// and DroppedFields; TypedFields lists the free-form fields mirrored as an
// upstream Kubernetes type.
//
// +kubebuilder:object:generate=true
package config

//go:generate go run github.com/maeshinshin/ichor/tools/cmd/mirrorgen -out . -convert-out ./convert
//go:generate go tool controller-gen object paths=.
