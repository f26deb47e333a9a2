
identity_fp32*&
INPUT0FP32*2▌┘*©╣-Х©У+╘©ом©