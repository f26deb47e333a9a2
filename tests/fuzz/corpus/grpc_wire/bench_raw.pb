
identity_fp32*
INPUT0FP32:▌┘*©╣-Х©У+╘©ом©