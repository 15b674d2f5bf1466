package convert

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/cel"
	"github.com/siderolabs/talos/pkg/machinery/config/types/block"
	"github.com/siderolabs/talos/pkg/machinery/config/types/meta"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"go.yaml.in/yaml/v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"

	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
)

// textTo parses the textual form of a machinery type; the empty string is the zero value.
func textTo[T any, PT interface {
	*T
	encoding.TextUnmarshaler
}](s string) (T, error) {
	var v T

	if s == "" {
		return v, nil
	}

	if err := PT(&v).UnmarshalText([]byte(s)); err != nil {
		return v, errors.New("invalid value")
	}

	return v, nil
}

// textFrom renders the textual form of a machinery type.
func textFrom[T encoding.TextMarshaler](v T) (string, error) {
	b, err := v.MarshalText()
	if err != nil {
		return "", err
	}

	return string(b), nil
}

var (
	celToMachinery             = textTo[cel.Expression]
	celFromMachinery           = textFrom[cel.Expression]
	byteSizeToMachinery        = textTo[block.ByteSize]
	byteSizeFromMachinery      = textFrom[block.ByteSize]
	blockSizeToMachinery       = textTo[block.Size]
	blockSizeFromMachinery     = textFrom[block.Size]
	metaAddrToMachinery        = textTo[meta.Addr]
	metaAddrFromMachinery      = textFrom[meta.Addr]
	metaAddrPortToMachinery    = textTo[meta.AddrPort]
	metaAddrPortFromMachinery  = textFrom[meta.AddrPort]
	metaPrefixToMachinery      = textTo[meta.Prefix]
	metaPrefixFromMachinery    = textFrom[meta.Prefix]
	netipAddrToMachinery       = textTo[netip.Addr]
	netipAddrFromMachinery     = textFrom[netip.Addr]
	netipAddrPortToMachinery   = textTo[netip.AddrPort]
	netipAddrPortFromMachinery = textFrom[netip.AddrPort]
	netipPrefixToMachinery     = textTo[netip.Prefix]
	netipPrefixFromMachinery   = textFrom[netip.Prefix]
)

//nolint:unparam // the generated code calls every helper as func(in) (out, error)
func durationToMachinery(in metav1.Duration) (time.Duration, error) { return in.Duration, nil }

//nolint:unparam // the generated code calls every helper as func(in) (out, error)
func durationFromMachinery(in time.Duration) (metav1.Duration, error) {
	return metav1.Duration{Duration: in}, nil
}

func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, errors.New("invalid URL")
	}

	return u, nil
}

func metaURLToMachinery(in string) (meta.URL, error) {
	if in == "" {
		return meta.URL{}, nil
	}

	u, err := parseURL(in)

	return meta.URL{URL: u}, err
}

//nolint:unparam // the generated code calls every helper as func(in) (out, error)
func metaURLFromMachinery(in meta.URL) (string, error) {
	if in.URL == nil {
		return "", nil
	}

	return in.String(), nil
}

func endpointToMachinery(in string) (v1alpha1.Endpoint, error) {
	if in == "" {
		return v1alpha1.Endpoint{}, nil
	}

	u, err := parseURL(in)

	return v1alpha1.Endpoint{URL: u}, err
}

//nolint:unparam // the generated code calls every helper as func(in) (out, error)
func endpointFromMachinery(in v1alpha1.Endpoint) (string, error) {
	if in.URL == nil {
		return "", nil
	}

	return in.String(), nil
}

func portRangeToMachinery(in string) (network.PortRange, error) {
	if in == "" {
		return network.PortRange{}, nil
	}

	lo, hi, isRange := strings.Cut(in, "-")
	if !isRange {
		hi = lo
	}

	l, errLo := strconv.ParseUint(lo, 10, 16)
	h, errHi := strconv.ParseUint(hi, 10, 16)

	if errLo != nil || errHi != nil {
		return network.PortRange{}, errors.New("invalid port range: want a port or lo-hi")
	}

	return network.PortRange{Lo: uint16(l), Hi: uint16(h)}, nil
}

//nolint:unparam // the generated code calls every helper as func(in) (out, error)
func portRangeFromMachinery(in network.PortRange) (string, error) {
	switch {
	case in == network.PortRange{}:
		return "", nil
	case in.Lo == in.Hi:
		return strconv.FormatUint(uint64(in.Lo), 10), nil
	default:
		return fmt.Sprintf("%d-%d", in.Lo, in.Hi), nil
	}
}

func diskSizeMatcherToMachinery(in string) (v1alpha1.InstallDiskSizeMatcher, error) {
	var m v1alpha1.InstallDiskSizeMatcher

	if in == "" {
		return m, nil
	}

	err := m.UnmarshalYAML(func(v any) error {
		s, ok := v.(*string)
		if !ok {
			return fmt.Errorf("unexpected target %T", v)
		}

		*s = in

		return nil
	})
	if err != nil {
		return m, errors.New("invalid size condition")
	}

	return m, nil
}

func diskSizeMatcherFromMachinery(in v1alpha1.InstallDiskSizeMatcher) (string, error) {
	v, err := in.MarshalYAML()
	if err != nil {
		return "", err
	}

	s, _ := v.(string)

	return s, nil
}

func argValueToMachinery(in mirror.ArgValue) (meta.ArgValue, error) {
	if in.Value != "" && in.Values != nil {
		return meta.ArgValue{}, errors.New("value and values are mutually exclusive")
	}

	return meta.NewArgValue(in.Value, in.Values), nil
}

func argValueFromMachinery(in meta.ArgValue) (mirror.ArgValue, error) {
	v, err := in.MarshalYAML()
	if err != nil || v == nil {
		return mirror.ArgValue{}, err
	}

	node, ok := v.(*yaml.Node)
	if !ok {
		return mirror.ArgValue{}, fmt.Errorf("unexpected argument form %T", v)
	}

	switch node.Kind { //nolint:exhaustive // ArgValue renders as a scalar or a sequence only
	case yaml.ScalarNode:
		return mirror.ArgValue{Value: node.Value}, nil
	case yaml.SequenceNode:
		values := make([]string, 0, len(node.Content))
		for _, item := range node.Content {
			values = append(values, item.Value)
		}

		return mirror.ArgValue{Values: values}, nil
	default:
		return mirror.ArgValue{}, fmt.Errorf("unexpected argument node kind %d", node.Kind)
	}
}

//nolint:unparam // the generated code calls every helper as func(in) (out, error)
func resourceListToMachinery(in corev1.ResourceList) (meta.Unstructured, error) {
	if in == nil {
		return meta.Unstructured{}, nil
	}

	out := make(map[string]any, len(in))
	for name, q := range in {
		out[string(name)] = q.String()
	}

	return meta.Unstructured{Object: out}, nil
}

func resourceListFromMachinery(in meta.Unstructured) (corev1.ResourceList, error) {
	if in.Object == nil {
		return nil, nil
	}

	out := make(corev1.ResourceList, len(in.Object))

	for name, v := range in.Object {
		var (
			q   resource.Quantity
			err error
		)

		switch v := v.(type) {
		case string:
			q, err = resource.ParseQuantity(v)
		case int:
			q = *resource.NewQuantity(int64(v), resource.DecimalSI)
		case int64:
			q = *resource.NewQuantity(v, resource.DecimalSI)
		case uint64:
			if v > uint64(1<<62) {
				err = errors.New("out of range")
			}

			q = *resource.NewQuantity(int64(v), resource.DecimalSI) //nolint:gosec // checked above
		case float64:
			q, err = resource.ParseQuantity(strconv.FormatFloat(v, 'f', -1, 64))
		default:
			err = fmt.Errorf("unexpected type %T", v)
		}

		if err != nil {
			return nil, fmt.Errorf("resource %s: not a quantity", name)
		}

		out[corev1.ResourceName(name)] = q
	}

	return out, nil
}

func credentialProviderToMachinery(in *kubeletconfigv1.CredentialProviderConfig) (meta.Unstructured, error) {
	if in == nil {
		return meta.Unstructured{}, nil
	}

	b, err := json.Marshal(in)
	if err != nil {
		return meta.Unstructured{}, err
	}

	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return meta.Unstructured{}, err
	}

	return meta.Unstructured{Object: out}, nil
}

func credentialProviderFromMachinery(in meta.Unstructured) (*kubeletconfigv1.CredentialProviderConfig, error) {
	if in.Object == nil {
		return nil, nil
	}

	b, err := json.Marshal(in.Object)
	if err != nil {
		return nil, errors.New("not representable as JSON")
	}

	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()

	var out kubeletconfigv1.CredentialProviderConfig
	if err := dec.Decode(&out); err != nil {
		// The decoder's message names the offending field, never a value.
		return nil, fmt.Errorf("not a kubelet CredentialProviderConfig (kubelet.config.k8s.io/v1): %w", err)
	}

	return &out, nil
}
