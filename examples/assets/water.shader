asset shader
name: water
stage: fragment
source: gl_FragColor = vec4(0.1, 0.3, 0.8, 1.0);
