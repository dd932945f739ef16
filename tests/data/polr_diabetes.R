# The reference of tests/test_discrete.py::test_equal_to_r_polr, run once and stored there:
# R 4.2.2 Patched (2022-11-10 r83330), MASS 7.3.58.2.
# diabetes.csv: scikit-learn's load_diabetes(as_frame=True, scaled=False) with its target
# cut into thirds (pandas.qcut(target, 3, labels=["low", "middle", "high"])) as
# "progression", and the columns bmi, bp and sex.
library(MASS)
d <- read.csv("diabetes.csv")
d$progression <- factor(d$progression, levels = c("low", "middle", "high"), ordered = TRUE)
for (m in c("logistic", "probit")) {
  # a tight optimum, and optim's Hessian by differences of 1e-5 (its default 1e-3 leaves
  # 3e-4 relative errors in the standard errors)
  fit <- polr(progression ~ bmi + bp + factor(sex), data = d, method = m, Hess = TRUE,
              control = list(reltol = 1e-15, maxit = 10000, ndeps = rep(1e-5, 5)))
  cat(m, "\n")
  print(sprintf("%.12g", c(coef(fit), fit$zeta)))
  print(sprintf("%.12g", sqrt(diag(vcov(fit)))))
  print(sprintf("%.12g", as.numeric(logLik(fit))))
}
