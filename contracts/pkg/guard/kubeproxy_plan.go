package guard

import (
	"fmt"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// KubeProxyPlanStep is one step of a kube-proxy switch as a person reads it
// before starting one: the step's name as status.step records it and what
// happens in it. The CLI's confirmation and the console's dialog print the
// same steps.
type KubeProxyPlanStep struct {
	Step, Action string
}

// KubeProxySwitchPlan is what a kube-proxy operation of cluster does to
// reach target (enabled or replaced), in the order the controller runs it
// (KubeProxySteps); nil for a mode Ichor does not know.
func KubeProxySwitchPlan(cluster, target string) []KubeProxyPlanStep {
	check := KubeProxyPlanStep{KubeProxyStepCheck,
		fmt.Sprintf("the operation takes cluster %s's lock and checks the switch again", cluster)}

	switch target {
	case ichorv1alpha1.KubeProxyReplaced:
		return []KubeProxyPlanStep{
			check,
			{KubeProxyStepCilium, "the ichor-cni Job upgrades Cilium's Helm release kube-system/cilium with kubeProxyReplacement: true; " +
				"Cilium's pods roll (the chart's rolling update)"},
			{KubeProxyStepVerify, "Cilium's replacement is verified on every node: the DaemonSet kube-system/cilium has rolled out " +
				"and the ConfigMap kube-system/cilium-config says kube-proxy-replacement: true"},
			{KubeProxyStepTalos, "Talos's side moves (status.cni.kubeProxy: replaced): the control planes' machine config turns kube-proxy off, " +
				"and the operation reads every control plane's running config back"},
			{KubeProxyStepCleanup, "Talos's kube-proxy DaemonSet, ServiceAccount, ClusterRoleBinding and ConfigMap in kube-system are deleted, " +
				"and their entries in Talos's manifest inventory, so that enabling kube-proxy again recreates them"},
		}
	case ichorv1alpha1.KubeProxyEnabled:
		return []KubeProxyPlanStep{
			check,
			{KubeProxyStepTalos, "Talos's side moves (status.cni.kubeProxy: enabled): the control planes' machine config turns kube-proxy on, " +
				"Talos creates the DaemonSet kube-system/kube-proxy, and the operation waits until it runs on every node"},
			{KubeProxyStepCilium, "the ichor-cni Job upgrades Cilium's Helm release kube-system/cilium with kubeProxyReplacement: false; " +
				"Cilium's pods roll (the chart's rolling update)"},
			{KubeProxyStepVerify, "the change is verified on every node: the DaemonSet kube-system/cilium has rolled out " +
				"and the ConfigMap kube-system/cilium-config says kube-proxy-replacement: false"},
		}
	}

	return nil
}

// KubeProxyOtherMode is the mode a switch of a cluster in mode moves to.
func KubeProxyOtherMode(mode string) string {
	if mode == ichorv1alpha1.KubeProxyReplaced {
		return ichorv1alpha1.KubeProxyEnabled
	}

	return ichorv1alpha1.KubeProxyReplaced
}
