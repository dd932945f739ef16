# The reference of tests/test_formula_discrete.py::test_brant_test_equals_car_po_test, run
# once and stored there: R 4.2.2 Patched (2022-11-10 r83330), MASS 7.3.58.2, car 3.1.1.
# diabetes2.csv: scikit-learn's load_diabetes(as_frame=True, scaled=False) with its target
# cut into quarters (pandas.qcut(target, 4, labels=["q1", "q2", "q3", "q4"])) as "grade4",
# and the columns bmi, bp, age and sex.
library(MASS); library(car)
d <- read.csv("diabetes2.csv")
d$grade4 <- factor(d$grade4, levels = c("q1", "q2", "q3", "q4"), ordered = TRUE)
fit <- polr(grade4 ~ bmi + bp + age + factor(sex), data = d, method = "logistic")
r <- poTest(fit)
cat(sprintf("%.12g", r$chisq), r$df, sprintf("%.12g", r$chisq.p), "\n")
cat(sprintf("%.12g", r$b[, -1]), "\n")
