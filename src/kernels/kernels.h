// All CPU fp32 kernels (forward/backward pairs) in one include.
#pragma once
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/convert.h"
#include "kernels/crossentropy.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
