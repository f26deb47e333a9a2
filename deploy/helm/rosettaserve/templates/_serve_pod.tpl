{{/*
The pod template of a `rosettaserve serve /mnt/models` pod: the plain server, or a prefill or
decode instance (.role). Arguments: root, component, role ("" for a plain server), extraArgs,
resources, grace, peers (an instance's --peer-allow).
*/}}
{{- define "rosettaserve.servePod" -}}
{{- $v := .root.Values -}}
metadata:
  labels:
    {{- include "rosettaserve.labels" . | nindent 4 }}
    {{- with $v.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $v.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- include "rosettaserve.podCommon" .root | nindent 2 }}
  terminationGracePeriodSeconds: {{ .grace }}
  containers:
    - name: rosettaserve
      image: {{ include "rosettaserve.image" .root }}
      imagePullPolicy: {{ $v.image.pullPolicy }}
      # the image's entry point: rosettaserve serve /mnt/models --host 0.0.0.0
      args:
        - --http-port
        - {{ $v.ports.http | quote }}
        - --grpc-port
        - {{ $v.ports.grpc | quote }}
        - --log-level
        - {{ $v.logLevel }}
        {{- if .role }}
        - --role
        - {{ .role }}
        # the address the other instances reach this one at: the pod's own
        - --advertise-host
        - $(POD_IP)
        # the only instances it contacts: the other role's pods
        - --peer-allow
        - {{ .peers }}
        {{- include "rosettaserve.peerArgs" .root | nindent 8 }}
        {{- end }}
        {{- include "rosettaserve.securityArgs" .root | nindent 8 }}
        {{- with $v.extraArgs }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- with .extraArgs }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      env:
        - name: POD_IP
          valueFrom:
            fieldRef:
              fieldPath: status.podIP
        {{- include "rosettaserve.securityEnv" .root | nindent 8 }}
        {{- with $v.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: http
          containerPort: {{ $v.ports.http }}
          protocol: TCP
        - name: grpc
          containerPort: {{ $v.ports.grpc }}
          protocol: TCP
      {{- include "rosettaserve.probes" . | nindent 6 }}
      resources:
        {{- toYaml .resources | nindent 8 }}
      securityContext:
        {{- toYaml $v.securityContext | nindent 8 }}
      volumeMounts:
        - name: models
          mountPath: /mnt/models
          readOnly: true
        {{- include "rosettaserve.securityMounts" .root | nindent 8 }}
  volumes:
    - name: models
      {{- toYaml $v.models.volume | nindent 6 }}
    {{- include "rosettaserve.securityVolumes" .root | nindent 4 }}
{{- end }}
