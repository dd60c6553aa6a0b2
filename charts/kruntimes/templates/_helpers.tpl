{{/*
Names, labels, images and the TLS wiring every template shares. Nothing here calls `lookup`
or generates randomness: the same values always render the same objects.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "kruntimes.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The name prefix of every object: fullnameOverride, or RELEASE-kruntimes (just RELEASE
when it already contains the chart name). Short enough for a suffix such as -gateway-metrics. */}}
{{- define "kruntimes.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "kruntimes.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "kruntimes.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kruntimes
{{- end -}}

{{/* Labels of one component's objects: (dict "ctx" $ "component" "gateway"). */}}
{{- define "kruntimes.componentLabels" -}}
{{ include "kruntimes.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The selector of one component's Pods: (dict "ctx" $ "component" "gateway"). */}}
{{- define "kruntimes.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kruntimes.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The image of one kruntimes component: (dict "ctx" $ "component" "runtimed"). */}}
{{- define "kruntimes.image" -}}
{{- $img := .ctx.Values.image -}}
{{- $prefix := trimSuffix "/" (printf "%s/%s" (trimSuffix "/" $img.registry) (trimSuffix "/" $img.repository)) -}}
{{- printf "%s/%s:%s" (trimPrefix "/" $prefix) .component (default .ctx.Chart.AppVersion $img.tag) -}}
{{- end -}}

{{/* Object names. */}}
{{- define "kruntimes.operator.name" -}}{{ include "kruntimes.fullname" . }}-operator{{- end -}}
{{- define "kruntimes.gateway.name" -}}{{ include "kruntimes.fullname" . }}-gateway{{- end -}}
{{- define "kruntimes.runtimed.name" -}}{{ include "kruntimes.fullname" . }}-runtimed{{- end -}}

{{/* Whether the gateway serves a protocol: (dict "ctx" $ "protocol" "https") → "true" or "". */}}
{{- define "kruntimes.gateway.serves" -}}
{{- if and .ctx.Values.gateway.enabled (has .protocol .ctx.Values.gateway.protocols) -}}true{{- end -}}
{{- end -}}

{{/* The public base URL of the gateway, the operator's --gateway-url. */}}
{{- define "kruntimes.gatewayURL" -}}
{{- if .Values.operator.gatewayURL -}}
{{- .Values.operator.gatewayURL -}}
{{- else -}}
{{- $host := printf "%s.%s.svc" (include "kruntimes.gateway.name" .) .Release.Namespace -}}
{{- $svc := .Values.gateway.service -}}
{{- if has "https" .Values.gateway.protocols -}}
{{- if eq (int $svc.httpsPort) 443 }}https://{{ $host }}{{ else }}https://{{ $host }}:{{ $svc.httpsPort }}{{ end -}}
{{- else -}}
{{- if eq (int $svc.httpPort) 80 }}http://{{ $host }}{{ else }}http://{{ $host }}:{{ $svc.httpPort }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
TLS. The internal links (gateway → runtimed, gateway → the operator's watch) always use mTLS
with an internal CA the operator keeps (`--internal-tls=managed`): Secrets
FULLNAME-internal-{ca,runtimed,gateway,operator}, each leaf with tls.crt, tls.key and ca.crt (the
internal bundle); the internal CA's key never leaves FULLNAME-internal-ca. The gateway's public
serving Secret is FULLNAME-gateway-tls in `chart` (the operator issues it from its CA
FULLNAME-public-ca) and `certManager` (the Certificate writes it) modes, tls.existingSecret.name
in `existingSecret` mode.
*/}}
{{- define "kruntimes.tls.gatewaySecret" -}}
{{- if eq .Values.tls.mode "existingSecret" -}}
{{- required "tls.existingSecret.name is required with tls.mode=existingSecret" .Values.tls.existingSecret.name -}}
{{- else -}}
{{- include "kruntimes.fullname" . }}-gateway-tls
{{- end -}}
{{- end -}}
{{- define "kruntimes.tls.publicCAConfigMap" -}}{{ include "kruntimes.fullname" . }}-gateway-ca{{- end -}}
{{- define "kruntimes.tls.publicCASecret" -}}{{ include "kruntimes.fullname" . }}-public-ca{{- end -}}
{{- define "kruntimes.tls.internalPrefix" -}}{{ include "kruntimes.fullname" . }}-internal{{- end -}}
{{- define "kruntimes.tls.internalSecret" -}}{{ include "kruntimes.tls.internalPrefix" .ctx }}-{{ .component }}{{- end -}}

{{/* Whether the public endpoint uses TLS → "true" or "": the chart's gateway serves HTTPS, or
the URL callers are given (operator.gatewayURL) is https://. Only then is a public serving
certificate made (chart, certManager) and a public CA bundle published. */}}
{{- define "kruntimes.tls.public" -}}
{{- if or (include "kruntimes.gateway.serves" (dict "ctx" . "protocol" "https")) (hasPrefix "https://" (include "kruntimes.gatewayURL" .)) -}}true{{- end -}}
{{- end -}}

{{/* Whether the operator issues the public CA and the gateway's serving certificate
(--public-tls=managed) → "true" or "". Otherwise (--public-tls=provided) it only publishes the
serving Secret's ca.crt, and with no public TLS at all (--public-tls=none) neither. */}}
{{- define "kruntimes.tls.publicManaged" -}}
{{- if and (eq .Values.tls.mode "chart") (include "kruntimes.tls.public" .) -}}true{{- end -}}
{{- end -}}

{{/* Whether the chart renders the CA ConfigMap itself → "true" or "": only with
tls.existingSecret.caBundle. Otherwise the operator creates it (and helm never owns it). */}}
{{- define "kruntimes.tls.caConfigMapRendered" -}}
{{- if and (include "kruntimes.tls.public" .) (eq .Values.tls.mode "existingSecret") .Values.tls.existingSecret.caBundle -}}true{{- end -}}
{{- end -}}

{{/* The in-cluster DNS names of Service `name` in the release namespace, as a list in JSON:
(dict "ctx" $ "name" "…"). */}}
{{- define "kruntimes.serviceNames" -}}
{{- $ns := .ctx.Release.Namespace -}}
{{- list .name (printf "%s.%s" .name $ns) (printf "%s.%s.svc" .name $ns) (printf "%s.%s.svc.cluster.local" .name $ns) | toJson -}}
{{- end -}}

{{/* The names (DNS or IP) of the gateway's serving certificate, comma-separated: the gateway
Service's DNS names, the host of the gateway URL and tls.extraNames, each once. */}}
{{- define "kruntimes.tls.gatewayNames" -}}
{{- $names := include "kruntimes.serviceNames" (dict "ctx" . "name" (include "kruntimes.gateway.name" .)) | fromJsonArray -}}
{{- $host := (urlParse (include "kruntimes.gatewayURL" .)).host -}}
{{- if hasPrefix "[" $host -}}
{{- $host = regexReplaceAll `^\[([^\]]*)\].*$` $host "${1}" -}}
{{- else -}}
{{- $host = regexReplaceAll ":[0-9]*$" $host "" -}}
{{- end -}}
{{- if $host -}}{{- $names = append $names $host -}}{{- end -}}
{{- $names = concat $names (default list .Values.tls.extraNames) -}}
{{- join "," (uniq $names) -}}
{{- end -}}

{{/* The DNS names of the operator's watch Service, comma-separated (its certificate also
carries kruntimes-control-plane, the name the gateways check). */}}
{{- define "kruntimes.tls.watchNames" -}}
{{- include "kruntimes.serviceNames" (dict "ctx" . "name" (include "kruntimes.operator.name" .)) | fromJsonArray | join "," -}}
{{- end -}}

{{/* The TLS server names the components check (the binaries' defaults). */}}
{{- define "kruntimes.tls.runtimedServerName" -}}runtimed.kruntimes.internal{{- end -}}
{{- define "kruntimes.tls.controlPlaneServerName" -}}kruntimes-control-plane{{- end -}}
{{- define "kruntimes.tls.gatewayClientName" -}}kruntimes-gateway{{- end -}}

{{/* The hardened security context of every Pod the chart renders (restricted PSS). */}}
{{- define "kruntimes.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The hardened security context of every container the chart renders (restricted PSS). */}}
{{- define "kruntimes.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
A NetworkPolicy egress rule with the cloud metadata address taken out: every IPv4 ipBlock whose
CIDR holds 169.254.169.254 gets 169.254.169.254/32 added to `except` (the API server refuses an
`except` outside its CIDR, so only those). A rule without peers (every address) is written as 0.0.0.0/0 and ::/0 so that the same applies.
A rule naming the address itself fails the render.
*/}}
{{- define "kruntimes.egressRuleWithoutMetadata" -}}
{{- $rule := deepCopy . -}}
{{- if not $rule.to -}}
{{- /* A rule without peers reaches every address: spell that out so the except applies. */ -}}
{{- $_ := set $rule "to" (list (dict "ipBlock" (dict "cidr" "0.0.0.0/0")) (dict "ipBlock" (dict "cidr" "::/0"))) -}}
{{- end -}}
{{- $peers := list -}}
{{- range $peer := $rule.to -}}
{{- if and (kindIs "map" $peer) (hasKey $peer "ipBlock") -}}
{{- $block := $peer.ipBlock -}}
{{- if and (contains "." $block.cidr) (not (contains ":" $block.cidr)) -}}
{{- $parts := splitList "/" $block.cidr -}}
{{- $bits := 32 -}}
{{- if eq (len $parts) 2 -}}{{- $bits = atoi (index $parts 1) -}}{{- end -}}
{{- $o := splitList "." (index $parts 0) -}}
{{- $ip := add (mul (atoi (index $o 0)) 16777216) (mul (atoi (index $o 1)) 65536) (mul (atoi (index $o 2)) 256) (atoi (index $o 3)) -}}
{{- $metadata := add (mul 169 16777216) (mul 254 65536) (mul 169 256) 254 -}}
{{- $size := 1 -}}
{{- range until (int (sub 32 $bits)) -}}{{- $size = mul $size 2 -}}{{- end -}}
{{- if eq (div $ip $size) (div $metadata $size) -}}
{{- if eq (int $bits) 32 -}}
{{- fail (printf "networkPolicy.runtimeEgress: %s is the cloud metadata address, which Runtime Pods may never reach" $block.cidr) -}}
{{- end -}}
{{- $except := default list $block.except -}}
{{- if not (has "169.254.169.254/32" $except) -}}
{{- $_ := set $block "except" (append $except "169.254.169.254/32") -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $peers = append $peers $peer -}}
{{- end -}}
{{- $_ := set $rule "to" $peers -}}
{{- toYaml $rule -}}
{{- end -}}
