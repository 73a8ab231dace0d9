#!/usr/bin/env python3
"""Writes act.onnx (conv -> HardSwish -> conv -> HardSigmoid -> Mul -> Softplus, opset 17, dynamic batch), an input
x.npy (2x3x16x16) and ref.npy, the float64 NumPy result, into the current directory. For checking and timing the
activation ops (spore run act.onnx --input x=x.npy --output out, then compare out/y.npy with ref.npy)."""
import numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
rng=np.random.default_rng(0)
w1=rng.standard_normal((8,3,3,3)).astype(np.float32)*0.5
w2=rng.standard_normal((8,8,3,3)).astype(np.float32)*0.3
nodes=[helper.make_node('Conv',['x','w1'],['c1'],pads=[1,1,1,1]),
       helper.make_node('HardSwish',['c1'],['h1']),
       helper.make_node('Conv',['h1','w2'],['c2'],pads=[1,1,1,1]),
       helper.make_node('HardSigmoid',['c2'],['s2'],alpha=1/6,beta=0.5),
       helper.make_node('Mul',['h1','s2'],['m']),
       helper.make_node('Softplus',['m'],['y'])]
g=helper.make_graph(nodes,'act',[helper.make_tensor_value_info('x',TensorProto.FLOAT,['N',3,16,16])],
                    [helper.make_tensor_value_info('y',TensorProto.FLOAT,['N',8,16,16])],
                    [numpy_helper.from_array(w1,'w1'),numpy_helper.from_array(w2,'w2')])
m=helper.make_model(g,opset_imports=[helper.make_opsetid('',17)]); m.ir_version=8
onnx.checker.check_model(m); onnx.save(m,'act.onnx')
x=(rng.standard_normal((2,3,16,16))*3).astype(np.float32); np.save('x.npy',x)
# numpy reference in float64
def conv(x,w):
    N,C,H,W=x.shape; O=w.shape[0]; xp=np.pad(x,((0,0),(0,0),(1,1),(1,1)))
    out=np.zeros((N,O,H,W))
    for i in range(3):
        for j in range(3):
            out+=np.einsum('nchw,oc->nohw',xp[:,:,i:i+H,j:j+W],w[:,:,i,j])
    return out
x64=x.astype(np.float64)
c1=conv(x64,w1.astype(np.float64)); h1=c1*np.clip(c1+3,0,6)/6
c2=conv(h1,w2.astype(np.float64)); s2=np.clip(c2/6+0.5,0,1); m_=h1*s2
y=np.maximum(m_,0)+np.log1p(np.exp(-np.abs(m_)))
np.save('ref.npy',y)
